import sys

from gridbench.cli import main

sys.exit(main())
