"""The command line, through a subprocess as a user runs it: start-up cost and bad input.

Every bad input must give one line on stderr, exit status 2, no traceback, and
leave the MLflow store untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from stores import new_store

from gridbench.environment import usable_cores, visible_gpu_count


def gridbench(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gridbench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_help_imports_no_framework():
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['gridbench', '--help']\n"
        "try:\n    runpy.run_module('gridbench', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'ray', 'mlflow', 'jax', 'torch') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "usage: gridbench" in result.stdout
    assert "HEAVY []" in result.stdout


def test_list_fits_80_columns_and_says_which_experiments_run_offline(tmp_path):
    empty = {"KERAS_HOME": str(tmp_path), "GRIDBENCH_DATA_DIR": str(tmp_path)}  # no dataset downloaded
    result = gridbench("list", env=empty)
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout

    def rows(out: str) -> dict[str, list[str]]:  # the table's rows, by experiment: offline, configs, model
        cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in out.splitlines() if line[:1] == "│"]
        return {row[0]: row[1:] for row in cells}

    rows_now = rows(result.stdout)
    assert rows_now["digits"] == ["yes", "4", "mlp"] and rows_now["kernels-digits"] == ["yes", "12", "kernel_ridge"]
    assert rows_now["examples/digits-cnn.toml"][0] == "yes"  # a user's own data: on disk
    assert rows_now["mnist"] == ["no (mnist)", "8", "mlp"] and rows_now["cifar10-resnet"][0] == "no (cifar10)"
    (tmp_path / "mnist.npz").write_bytes(b"")  # there now: a search reads it without a download
    assert rows(gridbench("list", env=empty).stdout)["mnist"][0] == "yes"
    models = result.stdout.split("--grid take:")[1]
    families = {line.split()[0] for line in models.splitlines() if line.startswith("  ") and not line.startswith("   ")}
    assert families >= {"mlp", "cnn", "vgg", "resnet", "smallcnn", "bilstm", "fasttext", "char_lstm", "kernel_ridge"}


BAD_SPEC = 'dataset = "digits"\nmodel = "mlp"\n[grid\n'


@pytest.mark.parametrize(
    "args, message",
    [
        (["search", "nope"], "unknown experiment 'nope'; known: cifar10-cnn, cifar10-resnet"),
        (["search", "{bad_toml}"], "invalid TOML"),
        (["search", "digits", "--grid", "width=1,2"], "--grid: unknown hyperparameter 'width'"),
        (["search", "digits", "--set", "width=1"], "--set: unknown hyperparameter 'width'"),
        (["search", "digits", "--grid", "learning_rate="], "grid axis 'learning_rate' is empty"),
        (["search", "digits", "--set", "learning_rate=0"], "learning_rate must be > 0 and <= 10, got 0.0"),
        (["search", "digits", "--set", "learning_rate=1e308"], "learning_rate must be > 0 and <= 10, got 1e+308"),
        (["search", "digits", "--set", "learning_rate=inf"], "learning_rate must be a finite number, got inf"),
        (["search", "digits", "--set", "batch_size=0"], "batch_size must be in [1, 1048576], got 0"),
        (["search", "digits", "--set", "batch_size=100000"], "batch_size 100000 is more than the 1347 training"),
        (["search", "digits", "--set", "epochs=0"], "epochs must be in [2, 10000]"),
        (["search", "digits", "--set", "epochs=1000000000000"], "epochs must be in [2, 10000]"),
        (["search", "digits", "--repeats", "100000"], "4 configurations x 100000 repeat(s) = 400000 trials is more"),
        (["search", "digits", "--grid", "hidden_units=1,2,3", "--max-trials", "2"], "is more than --max-trials 2"),
        (["search", "digits", "--repeats", "0"], "repeats must be an integer > 0, got 0"),
        (["search", "digits", "--cpus-per-trial", "999"], "--cpus-per-trial 999 is more than the"),
        (["search", "digits", "--cpus-per-trial", "0"], "--cpus-per-trial must be > 0"),
        (["search", "digits", "--max-concurrent", "0"], "--max-concurrent must be > 0"),
        (["search", "digits", "--compile-cache", "forever"], "invalid choice: 'forever'"),
        (["search", "digits", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["search", "digits", "--device", "gpu", "--gpus-per-trial", "1.5"], "above 1 a trial takes whole GPUs"),
        (["search", "digits", "--device", "gpu", "--gpus-per-trial", "0"], "--gpus-per-trial must be > 0, got 0"),
        (["search", "digits", "--gpus", "2"], "--gpus and --gpus-per-trial apply to --device gpu only"),
        (
            ["search", "digits", "--backend", "torch", "--set", "train_loop=compiled"],
            "train_loop=compiled needs --backend jax",
        ),
        (["search", "digits", "--set", "train_loop=scan"], "train_loop must be one of auto, fit, compiled"),
        (["search", "mnist-cnn", "--set", "precision=float16"], "precision must be one of float32, mixed_float16"),
        (["search", "cifar10-resnet", "--set", "depth=21"], "depth must be 6n+2"),
        (["search", "digits", "--cpus", "9999"], "--cpus 9999: this machine has"),
        (["scale", "digits", "--cpus", "2,1"], "--cpus '2,1': give increasing positive counts"),
        (["scale", "digits", "--cpus", "1,2", "--data-parallel"], "--data-parallel spreads a trial over GPUs"),
        (["scale", "digits"], "one of the arguments --gpus --cpus is required"),
        (
            ["search", "digits", "--tracking-uri", "sqlite:////no/such/dir/mlflow.db"],
            "directory /no/such/dir does not exist",
        ),
        (
            ["search", "digits", "--tracking-uri", "http://127.0.0.1:9/"],
            "tracking server http://127.0.0.1:9/ does not answer",
        ),
        (["search", "digits", "--tracking-uri", "{tmp}/filestore"], "is a file store, which MLflow 3 refuses"),
        (["search", "mnist", "--data-dir", "{tmp}/corrupt"], "is not a valid mnist.npz"),
        # An explicit --data-dir is the data or an error naming it: never another copy.
        (["search", "mnist", "--data-dir", "{tmp}/nowhere"], "nowhere does not exist; give the directory that holds"),
        (["search", "mnist", "--data-dir", "{tmp}/bad.toml"], "bad.toml is a file, not a directory"),
        (["search", "digits", "--data-dir", "{tmp}/nowhere"], "nowhere does not exist; digits comes with scikit-learn"),
        (["search", "mnist", "--data-dir", "{tmp}/store"], "store has no mnist.npz; put Keras' mnist.npz there"),
        # ray.init retried an address where nothing listens for minutes, printing Ray's C++ warnings.
        (["search", "digits", "--address", "127.0.0.1:1"], "--address 127.0.0.1:1: nothing answers there"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["compare", "0123abcd", "4567ef01"], "no MLflow store at sqlite:///"),
        (["baseline", "digits"], "baselines exist for kernel_ridge experiments"),
        (["baseline", "kernels-digits", "--n-jobs", "0"], "--n-jobs must not be 0"),
        (["compare", "--price", "H100", "0123abcd", "4567ef01"], "no MLflow store at"),
        (["search", "digits", "--device", "both", "--price", "H100"], "--price 'H100': expected KEY=USD_PER_HOUR"),
        (["ui", "--port", "70000"], "--port must be 0 (any free port) to 65535, got 70000"),
        (["ui"], "no MLflow store at sqlite:///"),  # the current directory's store, which is not there
        (["ui", "--tracking-uri", "sqlite:///{tmp}/missing.db"], "no MLflow store at sqlite:///"),
        (["report", "0123abcd"], "no MLflow store at sqlite:///"),
        (["search", "digits", "--pilot", "epochs=1"], "a pilot needs 2 epochs at least"),
        (["search", "digits", "--pilot", "epochs=x"], "give epochs=N, e.g. --pilot epochs=3"),
        (["search", "digits", "--pilot", "--resume", "0123abcd"], "it cannot --resume one"),
        (["search", "kernels-digits", "--pilot"], "--pilot projects Keras searches of a fixed number of epochs"),
        (["search", "digits", "--pilot", "--execution", "fused"], "a fused group's cost depends on its size"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    (tmp_path / "bad.toml").write_text(BAD_SPEC)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "mnist.npz").write_bytes(b"junk")
    args = [a.format(bad_toml=tmp_path / "bad.toml", tmp=tmp_path) for a in args]
    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    if "--tracking-uri" not in args:
        writes = args[0] in ("search", "scale", "compare", "baseline")
        args += ["--tracking-uri", f"sqlite:///{store}"] if writes else []
    result = gridbench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gridbench: error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not store.exists()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "filestore").exists()
    assert not (tmp_path / "missing.db").exists()


def test_the_ui_refuses_a_port_in_use(tmp_path):
    import socket

    store = new_store(tmp_path)  # a store, so that only the port is wrong
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gridbench("ui", "--port", str(port), "--tracking-uri", store, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr == (
        f"gridbench: error: port {port} on 127.0.0.1 is in use; choose another --port, or 0 for any free one\n"
    )


@pytest.mark.skipif(visible_gpu_count() > 0, reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["gpu", "both"])  # both: fails before its CPU search starts
def test_gpu_request_without_a_gpu_fails_at_once(tmp_path, device):
    result = gridbench("search", "digits", "--device", device, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gridbench: error: --device gpu: no GPU is visible on this machine (NVML found none); use --device cpu"
    )
    assert not (tmp_path / "mlflow.db").exists()


def test_cpus_per_trial_limit_is_this_machines_cores():
    result = gridbench("search", "digits", "--cpus-per-trial", str(usable_cores() + 1))
    assert result.returncode == 2
    assert f"use at most {usable_cores()}" in result.stderr


def test_keras_backend_variable_sets_the_default_backend(tmp_path):
    result = gridbench(
        "search", "digits", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", env={"KERAS_BACKEND": "numpy"}
    )
    assert result.returncode == 2
    assert result.stderr == (
        "gridbench: error: KERAS_BACKEND=numpy: the backend must be one of tensorflow, jax, torch, got 'numpy'\n"
    )
    assert not (tmp_path / "mlflow.db").exists()


def test_a_failed_download_is_one_line_with_no_framework_banner_before_it(tmp_path):
    """Keras' download imports TensorFlow, whose C++ banner went to the terminal before the error."""
    env = {
        "KERAS_HOME": str(tmp_path / "keras-home"),  # no cached copy
        "GRIDBENCH_DATA_DIR": "",
        "KERAS_BACKEND": "tensorflow",
        # The download fails at once, online or not: its proxy is a closed port.
        "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": "",
    }  # fmt: skip
    result = gridbench(
        "search", "mnist", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path, env=env
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gridbench: error: mnist not found") and "download failed" in result.stderr


def test_every_option_of_every_command_says_what_it_does_and_version_prints_the_version():
    import argparse

    from gridbench import __version__
    from gridbench.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    silent = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, command in commands.choices.items()
        for action in command._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert silent == []
    assert gridbench("--version").stdout.strip() == f"gridbench {__version__}"
    scale = gridbench("scale", "--help").stdout
    assert "$MLFLOW_TRACKING_URI" in scale and "fix a hyperparameter" in scale
    ui = gridbench("ui", "--help").stdout
    assert "processes)" not in ui and "log file" in ui  # not "lean (3 processes)": what it does
    search = " ".join(gridbench("search", "--help").stdout.split())
    assert "--compile-cache {search,persistent,off} JAX backend only" in search
    assert "--compile-ahead {auto,on,off} JAX backend only" in search
