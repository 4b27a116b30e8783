"""$/hour per CPU core and per GPU model, for cost per search; see gridbench/data/prices.toml.

Prices are inputs, not measurements: every output that shows a cost shows the
prices it used and where they came from.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gridbench.errors import UserError

DEFAULT_PRICES = Path(__file__).resolve().parent.parent / "data" / "prices.toml"


@dataclass(frozen=True)
class PriceTable:
    cpu_core_hour: float
    gpu_hour: Mapping[str, float] = field(default_factory=dict)
    source: str = str(DEFAULT_PRICES)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Sequence[str] = ()) -> PriceTable:
        path = Path(path) if path else DEFAULT_PRICES
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"--prices {path}: no such file") from None
        except tomllib.TOMLDecodeError as err:
            raise UserError(f"--prices {path}: invalid TOML: {err}") from None
        try:
            cpu = float(data["cpu_core_hour"])
            gpus = {str(k): float(v) for k, v in data.get("gpu_hour", {}).items()}
        except (KeyError, TypeError, ValueError):
            raise UserError(
                f"--prices {path}: expected cpu_core_hour = NUMBER and a [gpu_hour] table of NAME = NUMBER"
            ) from None
        source = str(path)
        for item in overrides:
            key, sep, value = item.partition("=")
            try:
                price = float(value)
            except ValueError:
                price = -1.0
            if not sep or price < 0:
                raise UserError(f'--price {item!r}: expected KEY=USD_PER_HOUR, e.g. --price "NVIDIA H100=2.50"')
            if key.strip() == "cpu_core_hour":
                cpu = price
            else:
                gpus[key.strip()] = price
            source += f" + --price {item}"
        return cls(cpu, gpus, source)

    def gpu_price(self, name: str) -> float | None:
        matches = [key for key in self.gpu_hour if name.startswith(key)]
        return self.gpu_hour[max(matches, key=len)] if matches else None

    def per_hour(self, tags: Mapping[str, str], cores: float, gpus: float) -> float | None:
        """$/hour of `cores` cores and `gpus` GPUs of the machine `tags` describe; None if a GPU is unpriced."""
        price = cores * self.cpu_core_hour
        if gpus:
            gpu = self.gpu_price(tags.get("gpu.0.name", ""))
            if gpu is None:
                return None
            price += gpus * gpu
        return price

    def describe(self, machines: Sequence[Mapping[str, str]]) -> dict[str, Any]:
        """The prices a comparison used, for its outputs."""
        used = {}
        for tags in machines:
            name = tags.get("gpu.0.name")
            if name and tags.get("device") == "gpu":
                used[name] = self.gpu_price(name)
        return {"source": self.source, "cpu_core_hour": self.cpu_core_hour, "gpu_hour": used}
