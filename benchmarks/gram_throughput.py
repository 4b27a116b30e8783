"""The RBF Gram stage's arithmetic rate against a plain cuBLAS product of the same shape, in one run.

    python benchmarks/gram_throughput.py [--n 40000] [--d 784] [--repeats 10] [--json FILE]

The Gram stage (gridbench.workloads.kernel_ridge.rbf_gram) is an n x d by d x n
matrix product plus one fused pass that turns inner products into kernel values.
Both it and a bare `x @ x.T` of the same shape are timed here with CUDA events
after a warm-up, on fresh random data (never zeros); TFLOP/s counts the product's
2 n^2 d flops for both, so the ratio is the share of the product's rate that the
whole stage keeps. Needs CuPy and a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from gridbench.workloads.kernel_ridge import rbf_gram  # noqa: E402


def timed(function, repeats: int) -> list[float]:
    function()  # warm-up: kernel compilation, cuBLAS handle and workspace
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40000)
    parser.add_argument("--d", type=int, default=784)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()

    rows = []
    for dtype in ("float32", "float64"):
        rng = cupy.random.default_rng(0)
        x = rng.random((args.n, args.d), dtype=dtype)  # in [0, 1), like scaled pixels
        flops = 2 * args.n * args.n * args.d
        product = timed(lambda: x @ x.T, args.repeats)
        gram = timed(lambda: rbf_gram(cupy, x, x, 0.01), args.repeats)
        # Correct as well as fast: a sample of entries against float64 NumPy.
        rows_idx = np.random.default_rng(1).choice(args.n, 64, replace=False)
        sample = x[rows_idx].get().astype(np.float64)
        full = x.get().astype(np.float64)
        expected = np.exp(-0.01 * np.maximum(((sample[:, None, :] - full[None, :512, :]) ** 2).sum(-1), 0))
        error = float(np.abs(rbf_gram(cupy, x, x, 0.01)[rows_idx, :512].get() - expected).max())
        row = {
            "dtype": dtype,
            "n": args.n,
            "d": args.d,
            "product_s": statistics.median(product),
            "gram_s": statistics.median(gram),
            "product_tflops": flops / statistics.median(product) / 1e12,
            "gram_tflops": flops / statistics.median(gram) / 1e12,
            "product_spread_s": [min(product), max(product)],
            "gram_spread_s": [min(gram), max(gram)],
            "max_abs_error": error,
        }
        row["gram_share_of_product"] = row["gram_tflops"] / row["product_tflops"]
        rows.append(row)
        print(
            f"{dtype}: product {row['product_tflops']:.1f} TFLOP/s ({row['product_s'] * 1e3:.2f} ms), "
            f"Gram stage {row['gram_tflops']:.1f} TFLOP/s ({row['gram_s'] * 1e3:.2f} ms): "
            f"{row['gram_share_of_product']:.0%} of the product; max error {error:.1e}",
            flush=True,
        )
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": device, "cupy": cupy.__version__, "repeats": args.repeats, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
