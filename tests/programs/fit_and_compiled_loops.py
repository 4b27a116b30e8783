"""`python fit_and_compiled_loops.py`: the digits MLP trained through Keras' fit and through the compiled loop, in
this process on JAX; prints one line per loop: loop, device, loop as recorded, samples, epochs, last loss, test
accuracy (test_workloads)."""

from gridbench import datasets
from gridbench.datasets import trial_data
from gridbench.trial.timing import PhaseClock
from gridbench.workloads import keras_mlp

HYPERPARAMETERS = dict(
    epochs=4, batch_size=32, hidden_units=64, hidden_layers=1, dropout=0.2, learning_rate=0.01, optimizer="adam"
)

if __name__ == "__main__":
    data = trial_data.load(datasets.DataSource("digits"), seed=0)
    for loop in ("fit", "compiled"):
        session = keras_mlp.open_session({**HYPERPARAMETERS, "train_loop": loop}, data, seed=0)
        session.build()
        clock = PhaseClock(sync=session.sync)
        loss = session.fit(clock)["train_loss"]
        facts = session.facts()
        accuracy = session.evaluate()["test_accuracy"]
        print(
            loop,
            session.actual_device(),
            facts["train_loop"],
            session.train_samples,
            len(clock.epochs),
            round(loss, 3),
            round(accuracy, 3),
        )
