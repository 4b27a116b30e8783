"""What each step from Keras `fit` to gridbench's compiled loop buys, measured in one run.

    KERAS_BACKEND=jax python benchmarks/fast_path.py [--data-dir DIR] [--epochs 6] [--json FILE]

One model throughout, the MNIST MLP of the GPU issue: 784-512-512-10, ReLU,
dropout 0.2, Adam (learning rate 0.001), batch 128, on JAX's default device.
Variants, each adding one change to the one before:

  scikeras-fit      Keras fit through SciKeras, as `train_loop=fit` trials run it
  keras-fit         plain model.fit on NumPy arrays (SciKeras' cost, if any)
  keras-fit-spe     model.fit with steps_per_execution=32 (several steps per call)
  step-host         a jitted Keras stateless step per batch, batches sliced from host memory
  step-device       the same step, the data resident on the device (indices sent per batch)
  scan-epoch        gridbench's compiled loop: the whole epoch in one lax.scan (train_loop=compiled)
  reference         a hand-written JAX MLP (no Keras, no dropout, Adam) with the same scan loop

Epoch 1 of each is warm-up (tracing, compilation) and reported apart; the steady
figure is the median of the rest, with min and max. Every epoch is timed after
the device has finished its work. Ratios are to `scikeras-fit` and to `reference`
from this same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from gridbench import environment  # noqa: E402
from gridbench.datasets import find, trial_data  # noqa: E402
from gridbench.trial.timing import PhaseClock  # noqa: E402
from gridbench.workloads import keras_compiled, keras_mlp  # noqa: E402

HYPERPARAMETERS = {
    "hidden_units": 512,
    "hidden_layers": 2,
    "dropout": 0.2,
    "optimizer": "adam",
    "learning_rate": 0.001,
    "batch_size": 128,
}


def session_variant(loop: str):
    def run(data, epochs, seed):
        session = keras_mlp.open_session({**HYPERPARAMETERS, "epochs": epochs, "train_loop": loop}, data, seed)
        session.build()
        clock = PhaseClock(sync=session.sync)
        session.fit(clock)
        return clock.epochs, session.evaluate()["test_accuracy"]

    return run


def _keras_model(data, seed):
    keras.utils.set_random_seed(seed)
    meta = {"n_features_in_": data.x_train.shape[1], "n_classes_": data.num_classes}
    return keras_mlp.build_mlp(512, 2, 0.2, meta)


def keras_fit(steps_per_execution: int):
    def run(data, epochs, seed):
        model = _keras_model(data, seed)
        model.compile(
            optimizer=keras.optimizers.Adam(0.001),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            steps_per_execution=steps_per_execution,
        )
        clock = PhaseClock(sync=lambda: keras.ops.convert_to_numpy(model.weights[-1].value))

        class Epochs(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                clock.epoch_begin()

            def on_epoch_end(self, epoch, logs=None):
                clock.epoch_end()

        model.fit(data.x_train, data.y_train, batch_size=128, epochs=epochs, verbose=0, callbacks=[Epochs()])
        return clock.epochs, model.evaluate(data.x_test, data.y_test, verbose=0, batch_size=1024)[1]

    return run


def stepwise(resident: bool):
    """One jitted stateless step per batch: data sliced on the host, or gathered on the device."""

    def run(data, epochs, seed):
        session = keras_mlp.open_session({**HYPERPARAMETERS, "epochs": epochs, "train_loop": "compiled"}, data, seed)
        session.build()  # model, optimizer, state and device copies as the compiled loop has them
        step = keras_compiled.make_train_step(
            session.model, session.optimizer, keras.losses.SparseCategoricalCrossentropy()
        )
        if resident:
            step_fn = jax.jit(
                lambda state, x_all, y_all, idx: step(state, jnp.take(x_all, idx, 0), jnp.take(y_all, idx, 0)),
                donate_argnums=0,
            )
        else:
            step_fn = jax.jit(step, donate_argnums=0)
        y_host = data.y_train.astype(np.int32)
        rng = np.random.default_rng(seed)
        state, times = session.state, []
        for _ in range(epochs):
            jax.block_until_ready(state)
            start = time.perf_counter()
            order = rng.permutation(len(data.x_train))
            for i in range(session.steps):
                idx = order[i * 128 : (i + 1) * 128]
                if resident:
                    state, loss = step_fn(state, session.x_train, session.y_train, idx)
                else:
                    state, loss = step_fn(state, data.x_train[idx], y_host[idx])
            jax.block_until_ready(state)
            times.append(time.perf_counter() - start)
        session.state = state
        return times, session.evaluate()["test_accuracy"]

    return run


def reference(data, epochs, seed):
    """A plain JAX MLP with hand-written Adam: the floor the issue measured (0.0225 s/epoch on an H100)."""
    sizes = [data.x_train.shape[1], 512, 512, data.num_classes]
    keys = jax.random.split(jax.random.key(seed), len(sizes) - 1)
    params = []
    for key, (n_in, n_out) in zip(keys, zip(sizes[:-1], sizes[1:])):
        limit = np.sqrt(6 / (n_in + n_out))  # Glorot uniform, as Keras' Dense
        params.append((jax.random.uniform(key, (n_in, n_out), minval=-limit, maxval=limit), jnp.zeros(n_out)))

    def forward(params, x):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    def loss_fn(params, x, y):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(forward(params, x)), y[:, None], axis=1))

    def adam(params, grads, m, v, t, lr=0.001, b1=0.9, b2=0.999, eps=1e-7):
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        return params, m, v

    steps = len(data.x_train) // 128

    @jax.jit
    def epoch(state, key, x_all, y_all):
        key, sub = jax.random.split(key)
        order = jax.random.permutation(sub, x_all.shape[0])[: steps * 128].reshape(steps, 128)

        def one(state, idx):
            params, m, v, t = state
            loss, grads = jax.value_and_grad(loss_fn)(params, x_all[idx], y_all[idx])
            params, m, v = adam(params, grads, m, v, t + 1)
            return (params, m, v, t + 1), loss

        state, losses = jax.lax.scan(one, state, order)
        return state, key, losses.mean()

    zeros = jax.tree.map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.array(0, jnp.int32))
    x, y = jax.device_put(data.x_train), jax.device_put(data.y_train.astype(np.int32))
    key, times = jax.random.key(seed + 1), []
    for _ in range(epochs):
        jax.block_until_ready(state)
        start = time.perf_counter()
        state, key, _ = epoch(state, key, x, y)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - start)
    predictions = jnp.argmax(forward(state[0], jnp.asarray(data.x_test)), -1)
    return times, float(jnp.mean(predictions == data.y_test))


VARIANTS = {
    "scikeras-fit": session_variant("fit"),
    "keras-fit": keras_fit(1),
    "keras-fit-spe": keras_fit(32),
    "step-host": stepwise(resident=False),
    "step-device": stepwise(resident=True),
    "scan-epoch": session_variant("compiled"),
    "reference": reference,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "digits"))
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()

    data = trial_data.load(find.locate(args.dataset, args.data_dir), seed=0)
    device = jax.devices()[0]
    print(
        f"device {device.platform}:{device.id} ({device.device_kind}); jax {jax.__version__}, keras {keras.__version__}"
    )
    results = {}
    for name in args.variants.split(","):
        epochs, accuracy = VARIANTS[name](data, args.epochs, seed=0)
        steady = epochs[1:]
        results[name] = {
            "warmup_epoch_s": epochs[0],
            "steady_epoch_s": statistics.median(steady),
            "steady_min_s": min(steady),
            "steady_max_s": max(steady),
            "test_accuracy": float(accuracy),
            "epochs_s": epochs,
        }
        print(f"  {name}: steady {results[name]['steady_epoch_s']:.4f} s/epoch, accuracy {accuracy:.4f}", flush=True)

    base = results.get("scikeras-fit", {}).get("steady_epoch_s")
    ref = results.get("reference", {}).get("steady_epoch_s")
    print(
        f"\n{'variant':<14} {'warm-up s':>10} {'steady s/epoch':>15} {'min-max':>17} {'acc':>7} {'vs fit':>7} {'/ ref':>7}"
    )
    for name, r in results.items():
        speedup = f"{base / r['steady_epoch_s']:.1f}x" if base else "-"
        to_ref = f"{r['steady_epoch_s'] / ref:.2f}" if ref else "-"
        span = f"{r['steady_min_s']:.4f}-{r['steady_max_s']:.4f}"
        print(
            f"{name:<14} {r['warmup_epoch_s']:>10.3f} {r['steady_epoch_s']:>15.4f} {span:>17} "
            f"{r['test_accuracy']:>7.4f} {speedup:>7} {to_ref:>7}"
        )
    if args.json:
        env = environment.collect()
        env["jax.device"] = f"{device.platform}:{device.id} {device.device_kind}"
        Path(args.json).write_text(
            json.dumps({"environment": env, "epochs": args.epochs, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
