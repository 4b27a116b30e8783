"""gridbench: how much faster, and how much cheaper, is a GPU for your hyperparameter search?"""

__version__ = "0.1.0"
