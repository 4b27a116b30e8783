"""Planning time of a share on 1,000 near-equal trials (seconds 1, 2 or 10, plus up to 1 ms), a86960c against now.

git show a86960c:gridbench/gridsearch/trial_order.py > /tmp/oldorder/old_trial_order.py
python docs/results/around-training/order-planning-2core.py /tmp/oldorder/old_trial_order.py
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time

from gridbench.gridsearch import trial_order as now


def load_old(path: str):
    spec = importlib.util.spec_from_file_location("old_trial_order", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_trial_order"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def old_share(module, seconds: list[float], slots: int) -> list[list[int]]:
    """a86960c's share, as its `balanced` found it."""
    found = [module._longest_first_shares(seconds, slots), module._differencing_shares(seconds, slots)]
    return min((module._improved(share, seconds) for share in found), key=lambda s: module._fullest(s, seconds))


def main() -> None:
    old = load_old(sys.argv[1])
    random.seed(0)
    seconds = [random.choice((1, 2, 10)) + random.random() * 1e-3 for _ in range(1000)]
    means = {m: round(sum(seconds) / m, 3) for m in (2, 8)}
    print("1,000 trials, seconds 1, 2 or 10 plus up to 1 ms (random.seed(0)); mean per slot:", means)
    for name, share in (("a86960c", lambda s, m: old_share(old, s, m)), ("fda5313", now.share_out)):
        for slots in (2, 8):
            start = time.perf_counter()
            shares = share(seconds, slots)
            took = time.perf_counter() - start
            print(f"{name} {slots} slots: fullest slot {now.fullest(shares, seconds):.3f} s, planned in {took:.3f} s")


if __name__ == "__main__":
    main()
