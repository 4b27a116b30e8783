"""Comparisons on fixed numbers: intervals, geometric means, cost, pairing, refusals, outputs."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from gridbench.comparison import compare
from gridbench.comparison import report as compare_report
from gridbench.comparison.pairing import time_to_target
from gridbench.comparison.prices import PriceTable
from gridbench.comparison.statistics import geometric_mean, ratio_with_interval
from gridbench.errors import UserError
from gridbench.tracking.stored_searches import SearchRun, TrialRun

PRICES = PriceTable(cpu_core_hour=0.05, gpu_hour={"NVIDIA H100": 3.0}, source="test")


def trial(key, wall, steady, repeat=0, status="FINISHED", accuracy=0.9, ended=10.0):
    config = dict(part.split("=") for part in key.split())
    metrics = {"trial_wall_s": wall, "steady_epoch_s": steady, "test_accuracy": accuracy}
    return TrialRun(key, config, repeat, status, metrics if status == "FINISHED" else {}, ended)


def search(run_id, device, trials, makespan, backend="jax", epochs="4", metrics=None, **tags):
    base_tags = {
        "spec.name": "mnist", "dataset": "mnist", "model": "mlp", "backend": backend, "metric": "test_accuracy",
        "metric.mode": "max", "metric.target": "0.95", "device": device, "cpu.model": "Xeon", "cpu.cores_usable": "16",
        "cpus_per_trial": "16" if device == "cpu" else "4", "gpus_per_trial": "1" if device == "gpu" else "0",
        "gpus_used": "1" if device == "gpu" else "0", "gpu.0.name": "NVIDIA H100 80GB HBM3", "version.keras": "3.15.1",
    }  # fmt: skip
    params = {"epochs": epochs, "grid.a": '["1", "2"]', "grid.b": '["x", "y"]', "repeats": "2", "seed": "0"}
    return SearchRun(run_id, {**base_tags, **tags}, params, {"makespan_s": makespan, **(metrics or {})}, tuple(trials))


def test_the_interval_is_a_welch_t_interval_on_log_times():
    r = ratio_with_interval([2.0, 2.2, 1.8], [1.0, 1.1, 0.9])
    # Both sides have the same log spread: se = 0.0819574, 4 degrees of freedom, t = 2.7764451.
    assert r.value == pytest.approx(2.0)
    assert r.low == pytest.approx(2 * math.exp(-2.7764451 * 0.0819574), rel=1e-6)
    assert r.high == pytest.approx(2 * math.exp(2.7764451 * 0.0819574), rel=1e-6)
    assert (round(r.low, 4), round(r.high, 4), r.significant) == (1.593, 2.511, True)


def test_an_interval_that_includes_one_is_not_significant_and_one_run_has_none():
    assert ratio_with_interval([1.0, 2.0], [1.5, 1.4]).significant is False
    single = ratio_with_interval([4.0], [2.0, 1.0])
    assert single.value == pytest.approx(4 / math.sqrt(2)) and single.low is None and single.significant is None
    exact = ratio_with_interval([4.0, 4.0], [2.0, 2.0])
    assert (exact.value, exact.low, exact.high) == (2.0, 2.0, 2.0)


def test_geometric_mean():
    assert geometric_mean([1.0, 4.0, 16.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None


def cpu_and_gpu():
    cpu = search("cpu-run", "cpu", [
        trial("a=1 b=x", 10.0, 1.0, ended=10), trial("a=1 b=x", 12.0, 1.2, 1, ended=22),
        trial("a=1 b=y", 20.0, 2.0, ended=42, accuracy=0.96), trial("a=1 b=y", 20.0, 2.0, 1, ended=62),
        trial("a=2 b=x", 5.0, 0.5, ended=67), trial("a=2 b=x", 5.0, 0.5, 1, ended=72),
        trial("a=2 b=y", 8.0, 0.8, status="FAILED", ended=80),
    ], makespan=100.0)  # fmt: skip
    gpu = search("gpu-run", "gpu", [
        trial("a=1 b=x", 2.0, 0.1, ended=3), trial("a=1 b=x", 2.4, 0.12, 1, ended=5),
        trial("a=1 b=y", 4.0, 0.2, ended=9, accuracy=0.97), trial("a=1 b=y", 4.0, 0.2, 1, ended=13),
        trial("a=2 b=x", 10.0, 0.05, ended=23), trial("a=2 b=x", 10.0, 0.05, 1, ended=33),
        trial("a=2 b=y", 3.0, 0.1, ended=36),
    ], makespan=25.0)  # fmt: skip
    return cpu, gpu


def test_cpu_against_gpu_per_configuration_and_per_search():
    result = compare(cpu_and_gpu(), PRICES)
    (pairing,) = result.pairings
    rows = {row.key: row for row in pairing.rows}
    assert sorted(rows) == ["a=1 b=x", "a=1 b=y", "a=2 b=x"]  # a=2 b=y failed on the CPU: excluded
    assert pairing.only_in_other == ("a=2 b=y",) and pairing.only_in_baseline == ()
    assert result.figures[0].failed == ("a=2 b=y #0",)
    assert rows["a=1 b=x"].speedup["steady_epoch_s"].value == pytest.approx(10.0)
    assert rows["a=2 b=x"].speedup["trial_wall_s"].value == pytest.approx(0.5)
    assert pairing.geomean_speedup["steady_epoch_s"] == pytest.approx((10 * 10 * 10) ** (1 / 3))
    assert pairing.geomean_speedup["trial_wall_s"] == pytest.approx((5 * 5 * 0.5) ** (1 / 3))
    assert pairing.makespan_speedup == pytest.approx(4.0)
    # Cost: CPU search 16 cores x $0.05 = $0.80/h for 100 s; GPU search $3 + 16 x $0.05 = $3.80/h for 25 s.
    cpu_fig, gpu_fig = result.figures
    assert cpu_fig.price_per_hour == pytest.approx(0.8) and gpu_fig.price_per_hour == pytest.approx(3.8)
    assert cpu_fig.cost == pytest.approx(0.8 * 100 / 3600) and gpu_fig.cost == pytest.approx(3.8 * 25 / 3600)
    assert gpu_fig.relative_time == pytest.approx(0.25) and gpu_fig.relative_cost == pytest.approx(3.8 / 3.2)
    # Per trial: CPU trial holds 16 cores ($0.80/h); GPU trial 4 cores and one GPU ($3.20/h).
    assert rows["a=1 b=y"].cost_ratio == pytest.approx((20 * 0.8) / (4 * 3.2))
    assert pairing.cpu_faster == ("a=2 b=x",)
    assert pairing.cpu_cheaper == ("a=2 b=x",)
    # Time to accuracy 0.95 (the spec's target): the first finished trial at or above it.
    assert cpu_fig.time_to_target_s == 42 and gpu_fig.time_to_target_s == 9


def test_time_to_target_from_the_flag_and_when_never_reached():
    cpu, gpu = cpu_and_gpu()
    assert time_to_target(cpu, "test_accuracy", 0.99, "max") is None
    assert time_to_target(cpu, "test_accuracy", 0.9, "max") == 10
    assert compare([cpu, gpu], PRICES, target=0.965).figures[1].time_to_target_s == 9


@pytest.mark.parametrize(
    "change, message",
    [
        ({"backend": "torch"}, "backend: jax \\(cpu .*\\) vs torch"),
        ({"dataset": "digits"}, "dataset: mnist"),
        ({"epochs": "3"}, "param epochs: 4 .* vs 3"),
    ],
)
def test_searches_that_measure_different_things_are_refused(change, message):
    cpu, _ = cpu_and_gpu()
    epochs = change.pop("epochs", "4")
    gpu = search("gpu-run", "gpu", cpu.trials, 25.0, epochs=epochs, **change)
    with pytest.raises(UserError, match=message):
        compare([cpu, gpu], PRICES)
    allowed = compare([cpu, gpu], PRICES, allow_mismatch=True)
    assert len(allowed.mismatches) == 1 and "MISMATCH (allowed)" in compare_report.markdown(allowed)


def test_environment_differences_are_shown_not_refused():
    cpu, gpu = cpu_and_gpu()
    flags = {"env.XLA_FLAGS": "--xla_gpu_enable_triton_gemm=false"}
    gpu = search("gpu-run", "gpu", gpu.trials, 25.0, **{"cpu.model": "EPYC", "version.keras": "3.16.0", **flags})
    result = compare([cpu, gpu], PRICES)
    assert "cpu.model: Xeon vs EPYC" in result.environment_differences
    assert "version.keras: 3.15.1 vs 3.16.0" in result.environment_differences
    assert "env.XLA_FLAGS: - vs --xla_gpu_enable_triton_gemm=false" in result.environment_differences


def test_the_environment_records_the_variables_that_change_what_is_compiled_where_set(monkeypatch):
    from gridbench import environment

    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    tags = environment.collect()
    assert tags["env.XLA_FLAGS"] == "--xla_gpu_autotune_level=0"
    assert "env.NVIDIA_TF32_OVERRIDE" not in tags and "env.UNRELATED_SETTING" not in tags


def test_one_search_is_not_a_comparison():
    with pytest.raises(UserError, match="at least two searches"):
        compare([cpu_and_gpu()[0]], PRICES)


def test_outputs_carry_the_same_figures(tmp_path):
    result = compare(cpu_and_gpu(), PRICES)
    document = json.loads(compare_report.render(result, "json"))
    assert document["pairings"][0]["makespan_speedup"] == pytest.approx(4.0)
    assert document["searches"][1]["relative_cost"] == pytest.approx(3.8 / 3.2)
    assert document["prices"] == {"source": "test", "cpu_core_hour": 0.05, "gpu_hour": {"NVIDIA H100 80GB HBM3": 3.0}}
    rows = list(csv.DictReader(io.StringIO(compare_report.render(result, "csv"))))
    assert [r["configuration"] for r in rows] == ["a=1 b=x", "a=1 b=y", "a=2 b=x"]
    assert float(rows[0]["steady_epoch_s_speedup"]) == pytest.approx(10.0)
    text = compare_report.markdown(result)
    assert "CPU faster per trial (at steady cost) for: #3 a=2 b=x" in text and "| geometric mean |" in text
    plots = compare_report.plot(result, tmp_path)
    assert sorted(plots) == [f"plots/{name}" for name in sorted(compare_report.PLOTS)]
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in plots.values())


# What a schema-3 search run holds besides a version-1 one's (which reads them as these defaults).
SCHEMA_3_TAGS = {"gridbench.schema": "3", "data.synthetic": "false", "timing.train": "steady_epoch_s",
                 "execution": "trials"}  # fmt: skip


def with_training_share(share: float):
    """cpu_and_gpu(), the GPU search recorded under schema 3 with its training share; the CPU one before it."""
    cpu, gpu = cpu_and_gpu()
    gpu = search("gpu-run", "gpu", gpu.trials, 25.0, metrics={"training_share": share}, **SCHEMA_3_TAGS)
    return cpu, gpu


def test_training_share_is_read_from_each_search_run_and_a_run_without_it_shows_a_dash():
    result = compare(with_training_share(0.4213), PRICES)
    assert [f.training_share for f in result.figures] == [None, 0.4213]  # never estimated for the older run
    headers, rows = compare_report.search_rows(result)
    column = headers.index("training share")
    assert [row[column] for row in rows] == ["-", "0.42"]
    text = compare_report.markdown(result)
    assert "| gpu x1 jax gpu-run | 25 | 0.25 | 9 | 3.8 | 0.0264 | 1.19 | 0.42 | 0 |" in text
    assert "training share -: the search was recorded before gridbench measured it" in text
    document = json.loads(compare_report.render(result, "json"))
    assert [s["training_share"] for s in document["searches"]] == [None, 0.4213]
    table = list(csv.DictReader(io.StringIO(compare_report.render(result, "csv"))))
    assert {(r["training_share_baseline"], r["training_share_other"]) for r in table} == {("", "0.4213")}
    gpu = with_training_share(0.4213)[1]
    other = search("gpu-2", "gpu", gpu.trials, 30.0, metrics={"training_share": 0.25}, **SCHEMA_3_TAGS)
    assert "training share -:" not in compare_report.markdown(compare([gpu, other], PRICES))


def test_a_nan_training_share_reads_as_unmeasured():
    cpu, gpu = with_training_share(float("nan"))
    assert compare([cpu, gpu], PRICES).figures[1].training_share is None


def test_prices_come_from_a_file_or_flags_and_bad_ones_are_refused(tmp_path):
    table = PriceTable.load(overrides=["cpu_core_hour=0.02", "NVIDIA H100 80GB=2.5"])
    assert table.cpu_core_hour == 0.02
    assert table.gpu_price("NVIDIA H100 80GB HBM3") == 2.5  # the longest matching name wins
    assert table.gpu_price("NVIDIA H200") == 3.8 and table.gpu_price("Some GPU") is None
    assert table.per_hour({"gpu.0.name": "Some GPU"}, cores=4, gpus=1) is None  # unpriced: no cost, not $0
    custom = tmp_path / "prices.toml"
    custom.write_text('cpu_core_hour = 0.1\n[gpu_hour]\n"Tesla T4" = 0.3\n')
    assert PriceTable.load(custom).gpu_hour == {"Tesla T4": 0.3}
    with pytest.raises(UserError, match="expected KEY=USD_PER_HOUR"):
        PriceTable.load(overrides=["H100"])
    (tmp_path / "bad.toml").write_text("gpu_hour = 3\n")
    with pytest.raises(UserError, match="expected cpu_core_hour = NUMBER"):
        PriceTable.load(tmp_path / "bad.toml")


def test_a_search_compared_with_itself_is_refused():
    cpu, gpu = cpu_and_gpu()
    with pytest.raises(UserError, match="run cpu-run is given twice; a search compared with itself says nothing"):
        compare([cpu, gpu, cpu], PRICES)
