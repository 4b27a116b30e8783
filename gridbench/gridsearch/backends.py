"""Which Keras backend a search trains on, chosen in the driver before anything starts.

A backend the user names wins: `--backend`, else `KERAS_BACKEND` (Keras' own
convention). Otherwise a CPU search keeps Keras' default, TensorFlow, and a GPU
search takes the first installed backend that can actually see a GPU, in the order
jax, torch, tensorflow: JAX has the compiled training loop, and TensorFlow's usual
install here is its CPU-only build.

"Can see a GPU" is asked of the backend itself, in a short-lived subprocess, so that
the driver never opens a GPU context or holds GPU memory that its trials would then
compete with. The probe's time is measured and recorded with the search.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from gridbench.errors import UserError

# Keras backends -> the module each needs.
BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
KERAS_DEFAULT = "tensorflow"  # Keras' default when KERAS_BACKEND is unset
GPU_ORDER = ("jax", "torch", "tensorflow")
PROBE_TIMEOUT_S = 120

# Each prints one JSON line: how many GPUs the backend sees, the first one's name, and
# whether the installed build was made for a GPU at all (for the message when it sees none).
_PROBE_CODE = {
    "jax": """
import json, jax
try:
    gpus = jax.devices("gpu")
except RuntimeError:
    gpus = []
print(json.dumps({"gpus": len(gpus), "name": gpus[0].device_kind if gpus else "", "gpu_build": bool(gpus)}))
""",
    "torch": """
import json, torch
n = torch.cuda.device_count()
name = torch.cuda.get_device_name(0) if n else ""
print(json.dumps({"gpus": n, "name": name, "gpu_build": torch.version.cuda is not None}))
""",
    "tensorflow": """
import json, tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "") if gpus else ""
print(json.dumps({"gpus": len(gpus), "name": name, "gpu_build": tf.test.is_built_with_cuda()}))
""",
}


@dataclass(frozen=True)
class Probe:
    """What one backend, asked in a subprocess, said about the GPUs it can use."""

    backend: str
    gpus: int
    name: str = ""  # the first GPU's name, as the backend reports it
    gpu_build: bool = True  # False: the installed build cannot use a GPU at all (tensorflow-cpu, CPU jaxlib)
    seconds: float = 0.0
    error: str = ""  # the probe itself failed (import error, crash, time-out)

    @property
    def sees_gpu(self) -> bool:
        return self.gpus > 0

    def why_not(self) -> str:
        if self.error:
            return f"{self.backend}: {self.error}"
        return f"{self.backend}: {'sees no GPU' if self.gpu_build else 'a CPU-only build'}"


Prober = Callable[[str], Probe]


def probe(backend: str) -> Probe:
    """Asks `backend` in a subprocess how many GPUs it can use; never raises."""
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        # Ask, don't take: JAX would otherwise reserve 75% of every GPU's memory for the probe.
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE_CODE[backend]],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return Probe(backend, 0, seconds=time.perf_counter() - start, error=f"no answer in {PROBE_TIMEOUT_S} s")
    seconds = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return Probe(backend, 0, seconds=seconds, error=f"the probe failed ({last[:200]})")
    answer = json.loads(lines[-1])
    return Probe(backend, int(answer["gpus"]), str(answer["name"]), bool(answer["gpu_build"]), seconds)


def installed(backend: str) -> bool:
    return importlib.util.find_spec(BACKENDS[backend]) is not None


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    reason: str  # one line: why this backend
    probe_s: float = 0.0  # time spent asking backends about GPUs (0: none asked)


def named_backend(flag: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The backend the user named, with where: `--backend`, else KERAS_BACKEND; None if neither."""
    environ = os.environ if environ is None else environ
    if flag:
        return flag, f"--backend {flag}"
    if environ.get("KERAS_BACKEND"):
        return environ["KERAS_BACKEND"], f"KERAS_BACKEND={environ['KERAS_BACKEND']}"
    return None


def choose(
    device: str,
    named: tuple[str, str] | None,
    *,
    cuda_major: int | None = None,
    prober: Prober | None = None,
    is_installed: Callable[[str], bool] | None = None,
) -> BackendChoice:
    """The backend a search on `device` trains on, or a UserError saying what to install.

    `named` is (backend, where it was named) or None; `cuda_major` is the driver's CUDA
    major version, for naming the extra that matches it. `prober` and `is_installed`
    default to this module's probe and installed (looked up at call time, for tests).
    """
    prober = prober or probe
    is_installed = is_installed or installed
    if named is not None:
        backend, where = named
        if backend not in BACKENDS:
            raise UserError(f"{where}: the backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if not is_installed(backend):
            extra = "" if backend == "tensorflow" else f" (pip install 'gridbench[{backend}]')"
            raise UserError(f"{where}: backend {backend} is not installed{extra}; or choose another --backend")
        if device != "gpu":
            return BackendChoice(backend, where)
        # A named backend that cannot see the GPU would fail every trial: say so now.
        found = prober(backend)
        if not found.sees_gpu:
            raise UserError(
                f"{where} cannot use a GPU here ({found.why_not()}); {_gpu_install_hint(cuda_major)}, "
                f"or name another backend"
            )
        return BackendChoice(backend, f"{where}; it sees {_gpus(found)}", found.seconds)
    if device != "gpu":
        return BackendChoice(KERAS_DEFAULT, "Keras' default for a CPU search (KERAS_BACKEND is unset)")
    tried: list[Probe] = []
    for backend in GPU_ORDER:
        if not is_installed(backend):
            continue
        found = prober(backend)
        tried.append(found)
        if found.sees_gpu:
            skipped = "".join(f"; {t.why_not()}" for t in tried[:-1])
            return BackendChoice(
                backend,
                f"the first installed backend that sees a GPU ({', '.join(GPU_ORDER)}): {backend} sees {_gpus(found)}"
                f"{skipped}",
                sum(t.seconds for t in tried),
            )
    asked = "; ".join(t.why_not() for t in tried) or "none of jax, torch, tensorflow is installed"
    raise UserError(
        f"--device gpu: no installed Keras backend can use the GPU ({asked}); {_gpu_install_hint(cuda_major)}"
    )


def _gpus(found: Probe) -> str:
    return f"{found.gpus} GPU{'s' if found.gpus != 1 else ''} ({found.name}; asked in {found.seconds:.1f} s)"


def _gpu_install_hint(cuda_major: int | None) -> str:
    if cuda_major in (12, 13):  # the extra that matches the driver
        return f"install JAX's CUDA build: pip install 'gridbench[cuda{cuda_major}]'"
    return "install JAX's CUDA build: pip install 'gridbench[cuda13]' (or [cuda12]: nvidia-smi's CUDA Version)"


def parse_flag(text: str | None) -> dict[str, str]:
    """`--backend NAME` (every device) or `--backend cpu=NAME,gpu=NAME` (one per half of --device both)."""
    if not text:
        return {}
    if "=" not in text:
        return {"cpu": text, "gpu": text}
    named = {}
    for part in text.split(","):
        device, _, backend = part.partition("=")
        if device.strip() not in ("cpu", "gpu") or not backend.strip():
            raise UserError(f"--backend {text!r}: give a backend (jax) or one per device (cpu=tensorflow,gpu=jax)")
        named[device.strip()] = backend.strip()
    return named
