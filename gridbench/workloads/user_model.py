"""A user's own Keras model: `model = "package.module:build"` and its declared hyperparameters.

`build(hp)` receives the trial's hyperparameters as a read-only mapping and returns an
uncompiled keras.Model. gridbench keeps owning what makes timings comparable (epochs,
batch size, optimizer, learning rate, precision, the training loop), so a user model
trains through the same sessions as the built-in families (gridbench.workloads.keras_user).

Framework-free: specs are checked here before anything heavy is imported; the module
itself is imported in the driver's check subprocess (gridbench.workloads.user_probe) and
in the trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gridbench.errors import UserError
from gridbench.workloads import (
    TRAIN_SIZE,
    Hyperparameter,
    Value,
    Workload,
    dropout_hyperparameter,
    keras_hyperparameters,
)

_KINDS = {"int": int, "float": float, "str": str}
_DECLARATION_KEYS = ("type", "default", "min", "max", "choices", "description")


def owned_names() -> frozenset[str]:
    """Names gridbench owns: the training set-up it controls, and what it records beside hyperparameters.

    `dropout` is among them: gridbench treats it as a runtime value held in
    TunableDropout layers (one compiled program serves every rate), which a
    user's builder might not honour; name a user's own rate otherwise.
    """
    from gridbench.tracking import schema  # light: names only

    common = {hp.name for hp in (*keras_hyperparameters(), TRAIN_SIZE, dropout_hyperparameter(0.0))}
    recorded = {schema.PARAM_SEED, schema.PARAM_REPEATS, schema.PARAM_REPEAT, schema.DATASET, schema.MODEL}
    return frozenset(common | recorded)


def is_model_reference(model: Any) -> bool:
    """A user's builder: "package.module:function", or (from Python) the function itself."""
    return callable(model) or (isinstance(model, str) and ":" in model)


def reference_of(model: str | Callable) -> str:
    """How a builder or loader is named in records: "module:function"."""
    if isinstance(model, str):
        return model
    return f"{getattr(model, '__module__', '?')}:{getattr(model, '__qualname__', type(model).__name__)}"


def check_reference(reference: str, what: str, where: str) -> None:
    module, sep, attribute = reference.partition(":")
    if (
        not sep
        or not module.strip()
        or not attribute.strip()
        or not all(part.isidentifier() for part in (*module.split("."), *attribute.split(".")))
    ):
        raise UserError(f'{where}: {what} {reference!r} must be "package.module:function", e.g. "my_models:build"')


@dataclass(frozen=True)
class UserModel:
    """A user's model: its builder (a reference, or the function) and its own hyperparameters."""

    reference: str  # "package.module:build", or the function's module:qualname
    declared: Mapping[str, Mapping[str, Any]]  # name -> {"type": "int", "default": 32, ...}, as written
    hyperparameters: tuple[Hyperparameter, ...]
    base_dir: str | None = None  # where "package.module" is looked for first (the TOML's folder)
    builder: Callable | None = field(default=None, compare=False, repr=False)  # given from Python

    @property
    def workload(self) -> Workload:
        return Workload(
            name=self.reference,
            datasets=(),  # any dataset: a built-in one, or the user's own
            hyperparameters=(*keras_hyperparameters(), TRAIN_SIZE, *self.hyperparameters),
            train="gridbench.workloads.keras_user:UserEntry",
            flat_inputs=False,
            description=f"your model {self.reference}",
            model_builder=self.builder if self.builder is not None else (self.reference, self.base_dir),
        )

    def declarations(self) -> dict[str, dict[str, Any]]:
        """The declarations as plain data, for the spec's record and hash."""
        return {name: dict(declared) for name, declared in self.declared.items()}


def user_model(model: str | Callable, declared: Any, where: str, base_dir: str | None = None) -> UserModel:
    """Checks a user model's reference and its declared hyperparameters (raises UserError)."""
    builder = None
    if callable(model):
        builder = model
    else:
        check_reference(model, "model", where)
    if declared is None:
        declared = {}
    if not isinstance(declared, Mapping):
        raise UserError(f"{where}: [hyperparameters] must be a table of tables, e.g. [hyperparameters.filters]")
    hyperparameters = tuple(declare(name, spec, where) for name, spec in declared.items())
    return UserModel(
        reference=reference_of(model),
        declared={name: dict(spec) for name, spec in declared.items()},
        hyperparameters=hyperparameters,
        base_dir=base_dir,
        builder=builder,
    )


def declare(name: Any, spec: Any, where: str) -> Hyperparameter:
    """One declared hyperparameter: type, default, and optional min/max or choices."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(f"{where}: hyperparameter name {name!r} must be an identifier, e.g. filters")
    if name in owned_names():
        raise UserError(
            f"{where}: hyperparameter {name!r} is a name gridbench owns "
            f"({', '.join(sorted(owned_names()))}); set it in [params] or [grid], or give yours another name"
        )
    if not isinstance(spec, Mapping):
        raise UserError(f'{where}: hyperparameter {name!r} must be a table: type = "int", default = ...')
    unknown = sorted(set(spec) - set(_DECLARATION_KEYS))
    if unknown:
        raise UserError(
            f"{where}: hyperparameter {name!r}: unknown key(s) {', '.join(unknown)}; "
            f"valid: {', '.join(_DECLARATION_KEYS)}"
        )
    kind = _KINDS.get(spec.get("type")) if isinstance(spec.get("type"), str) else None
    if kind is None and spec.get("type") in _KINDS.values():
        kind = spec["type"]  # from Python: type=int
    if kind is None:
        raise UserError(f'{where}: hyperparameter {name!r} needs type = "int", "float" or "str"')
    if "default" not in spec:
        raise UserError(f"{where}: hyperparameter {name!r} needs a default")
    low, high, choices = spec.get("min"), spec.get("max"), spec.get("choices")
    if choices is not None and (low is not None or high is not None):
        raise UserError(f"{where}: hyperparameter {name!r}: give choices or min/max, not both")
    for bound_name, bound in (("min", low), ("max", high)):
        if bound is not None and (kind is str or isinstance(bound, bool) or not isinstance(bound, (int, float))):
            raise UserError(f"{where}: hyperparameter {name!r}: {bound_name} must be a number of its type")
    if low is not None and high is not None and low > high:
        raise UserError(f"{where}: hyperparameter {name!r}: min {low!r} is above max {high!r}")
    if choices is not None:
        if not isinstance(choices, (list, tuple)) or not choices:
            raise UserError(f"{where}: hyperparameter {name!r}: choices must be a non-empty list")
        checker = Hyperparameter(name, kind, choices[0])
        choices = tuple(checker.coerce(c, f"{where}: [hyperparameters.{name}] choices") for c in choices)
    rule, valid = _rule(low, high)
    hp = Hyperparameter(name, kind, None, rule, valid, tuple(choices) if kind is str and choices else ())
    if choices is not None and kind is not str:  # numeric choices: Hyperparameter.choices holds strings only
        allowed = frozenset(choices)
        hp = Hyperparameter(
            name, kind, None, f"one of {', '.join(map(str, choices))}", lambda v, allowed=allowed: v in allowed
        )
    # A default must keep its own bounds.
    default = hp.coerce(spec["default"], f"{where}: [hyperparameters.{name}] default")
    return Hyperparameter(hp.name, hp.kind, default, hp.rule, hp.valid, hp.choices)


def _rule(low: float | None, high: float | None) -> tuple[str, Callable[[Value], bool]]:
    if low is None and high is None:
        return "", lambda value: True
    lo = -math.inf if low is None else low
    hi = math.inf if high is None else high
    text = f">= {low}" if high is None else (f"<= {high}" if low is None else f"in [{low}, {high}]")
    return text, lambda value, lo=lo, hi=hi: lo <= value <= hi


def import_callable(reference: str, base_dir: str | None, what: str) -> Callable:
    """ "package.module:function" imported, `base_dir` (the spec's folder) searched after sys.path.

    Raises UserError when the module cannot be imported, lacks the attribute, or it is not callable.
    """
    import importlib
    import sys

    module_name, _, attribute = reference.partition(":")
    added = bool(base_dir) and base_dir not in sys.path
    if added:
        sys.path.append(base_dir)
    try:
        loaded = importlib.import_module(module_name)
    except ImportError as err:
        looked = f" (looked on sys.path and in {base_dir})" if base_dir else ""
        raise UserError(
            f"{what} {reference}: cannot import {module_name} ({err}){looked}; put the module in the current "
            f"directory or the spec's, or on PYTHONPATH"
        ) from None
    except Exception as err:
        raise UserError(f"{what} {reference}: importing {module_name} raised {type(err).__name__}: {err}") from None
    finally:
        if added:
            sys.path.remove(base_dir)
    for part in attribute.split("."):
        if not hasattr(loaded, part):
            raise UserError(f"{what} {reference}: {module_name} has no attribute {attribute!r}; check the name")
        loaded = getattr(loaded, part)
    if not callable(loaded):
        raise UserError(
            f"{what} {reference}: {attribute} is a {type(loaded).__name__}, not a function; name a function"
        )
    return loaded
