"""One verdict you can trust: per-configuration figures at their steady cost, intervals, the verdict line, one
search projected; on searches recorded in the in-memory store."""

from __future__ import annotations

import json
import math

import pytest

from gridbench.comparison import compare, spread, verdict
from gridbench.comparison import report as compare_report
from gridbench.comparison.pairing import STEADY_TRIAL
from gridbench.comparison.prices import PriceTable
from gridbench.comparison.projection import project_search
from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.memory_recorder import MemoryRecorder
from gridbench.tracking.records import SearchSummary, TrialRecord, config_numbers
from gridbench.tracking.schema import SearchStatus, TrialStatus

PRICES = PriceTable(cpu_core_hour=0.05, gpu_hour={"NVIDIA H100": 3.0}, source="test")
EPOCHS = 4


def search_tags(device: str) -> dict[str, str]:
    """A search's tags as a driver writes them: the MNIST MLP on JAX, 16 cores per CPU trial or one H100."""
    return {"spec.name": "mnist", "dataset": "mnist", "model": "mlp", "backend": "jax", "metric": "test_accuracy",
            "metric.mode": "max", "device": device, "cpu.cores_usable": "16", "cpus_per_trial": "16",
            "gpus_per_trial": "1" if device == "gpu" else "0", "gpus_used": "1" if device == "gpu" else "0",
            "gpu.0.name": "NVIDIA H100 80GB HBM3", "data.synthetic": "false", "timing.train": "steady_epoch_s",
            "execution": "trials", "host": "h"}  # fmt: skip


def recorded(device, overhead, epoch, first_worker_s, first_use_s=(), trials=4, run="s", failed=0, repeats=1):
    """A search of `trials` configurations (one at a time, one worker) whose first trial pays its worker's start
    (imports `first_worker_s[0]`, and `first_worker_s[1]` more in setup), and whose trials at `first_use_s` pay
    their program's first use (compile_s 0.6 s); every other part as `overhead` and `epoch` say."""
    store = MemoryRecorder("mnist")
    tags = search_tags(device)
    grid = json.dumps([str(i) for i in range(trials)])
    store.start(run, {"epochs": EPOCHS, "grid.lr": grid, "repeats": repeats}, tags, {})
    clock, parts = 1010.0, {"startup_s": 10.0, "compile_s": 0.0, "worker_start_s": 0.0, "trial_overhead_s": 0.0,
                            "warmup_s": 0.0, "training_s": 0.0, "end_s": 2.0}  # fmt: skip
    for index in range(trials * repeats):
        imports, setup = first_worker_s if index == 0 else (0.0, 0.0)
        compile_s = 0.6 if index in first_use_s else 0.0
        wall = overhead + EPOCHS * epoch + imports + setup + compile_s
        metrics = {schema.TRIAL_WALL_S: wall, schema.IMPORT_S: imports, schema.COMPILE_S: compile_s,
                   schema.TRAIN_EPOCHS_S: EPOCHS * epoch, schema.WARMUP_EPOCH_S: epoch, schema.STEADY_EPOCH_S: epoch,
                   schema.STEADY_EPOCHS: EPOCHS - 1.0, schema.STEADY_EPOCH_STD_S: 0.0}  # fmt: skip
        status = TrialStatus.FAILED if index < failed else TrialStatus.FINISHED
        config = {"lr": str(index % trials)}
        record = TrialRecord(str(index), config, index // trials, status, metrics, {"host": "h", "pid": "1"}, clock,
                             clock + wall)  # fmt: skip
        store.record_trial(record, {}, {})
        clock += wall
        parts["worker_start_s"] += imports + setup
        parts["compile_s"] += compile_s
        parts["trial_overhead_s"] += overhead
        parts["training_s"] += EPOCHS * epoch
    store.parent.started_at = 1000.0
    makespan = clock - 1010.0 + 1.0
    summary = SearchSummary(trials * repeats, trials * repeats, 0, 1, makespan, 0.0, 10.0, 0.0, None, account=parts)
    store.finish(summary, SearchStatus.FINISHED)
    return store.search_run()


def pair(**options):
    # The GPU worker's first trial pays 4.5 s of imports and 0.9 s more setup; trials 1 and 2 load their programs.
    cpu = recorded("cpu", overhead=0.5, epoch=2.0, first_worker_s=(3.0, 0.5), run="cpu", **options)
    gpu = recorded("gpu", overhead=0.4, epoch=0.05, first_worker_s=(4.5, 0.9), first_use_s=(1, 2), run="gpu", **options)
    return cpu, gpu


def test_a_worker_first_trial_and_a_programs_first_use_give_no_false_cheaper_verdict():
    comparison = compare(list(pair()), PRICES)
    (pairing,) = comparison.pairings
    assert pairing.cpu_cheaper == () and pairing.cpu_faster == () and pairing.baseline_cheaper == ()
    steady = (0.5 + EPOCHS * 2.0) / (0.4 + EPOCHS * 0.05)  # the trials' steady parts: 14.2x
    for row in pairing.rows:
        assert row.speedup[STEADY_TRIAL].value == pytest.approx(steady, rel=0.05), row.key
        # The one-off parts are shown apart, and the two add up to the trial's wall time as run.
        assert row.other[STEADY_TRIAL] + row.other["one_off_in_trial_s"] == pytest.approx(row.other["trial_wall_s"])
    first = {row.key: row for row in pairing.rows}["lr=0"]
    assert first.first_only == (True, True) and first.other["one_off_in_trial_s"] == pytest.approx(5.4)
    # As run, the worker's first trial reads 5.8 s against 8.5 s: the wall figure alone would have said "CPU cheaper".
    assert first.speedup["trial_wall_s"].value * 0.8 / 3.8 < 1 < first.cost_ratio
    text = compare_report.markdown(comparison)
    assert "CPU cheaper" not in text and "†" in text


def test_configurations_have_one_numbering_everywhere():
    numbers = config_numbers([{"hidden_units": "1024"}, {"hidden_units": "256"}, {"hidden_units": "512"}])
    assert numbers == {"hidden_units=256": 1, "hidden_units=512": 2, "hidden_units=1024": 3}
    comparison = compare(list(pair(trials=12)), PRICES)
    document = json.loads(compare_report.render(comparison, "json"))
    shown = {key: row["number"] for key, row in document["pairings"][0]["configurations"].items()}
    assert shown["lr=2"] == 3 and shown["lr=10"] == 11  # by value, not by text ("lr=10" sorts before "lr=2")
    assert [row.number for row in comparison.pairings[0].rows] == sorted(shown.values())


def test_the_verdict_is_one_sentence_with_its_interval_cost_size_and_basis():
    comparison = compare(list(pair()), PRICES)
    (found,) = comparison.verdicts
    assert found.text.startswith("verdict: the GPU search finishes ")
    assert "x sooner [" in found.text and "for 4 configurations x 4 epochs (the whole search as run)" in found.text
    makespans = [s.metrics["makespan_s"] for s in comparison.searches]
    assert found.speedup == pytest.approx(makespans[0] / makespans[1])
    low, high = found.interval
    assert low < found.speedup < high
    document = json.loads(compare_report.render(comparison, "json"))["verdict"]
    assert {"speedup", "interval", "cost_ratio", "size", "basis", "text"} <= set(document)
    assert document["size"] == {"epochs": 4, "configs": 4, "repeats": 1}
    # The report's page and the markdown are headed by the same sentence.
    from gridbench.comparison import html

    assert html.comparison_page(comparison, "sqlite:///x.db").index(found.text) < 1000
    assert compare_report.markdown(comparison).splitlines()[2] == f"**{found.text}**"


def test_with_project_the_verdict_is_at_that_size_and_says_it_is_projected():
    comparison = compare(list(pair()), PRICES, project={"epochs": 40})
    (found,) = comparison.verdicts
    assert found.basis == "projected to 4 configurations x 40 epochs" and found.size["epochs"] == 40
    asked = comparison.pairings[0].projection.rows[-1]
    assert found.speedup == pytest.approx(asked.speedup.value) and found.speedup > comparison.pairings[0].speedup_as_run


def test_a_dearer_other_search_says_from_how_many_epochs_it_is_cheaper():
    cpu = recorded("cpu", overhead=0.5, epoch=0.5, first_worker_s=(3.0, 0.0), run="cpu")
    gpu = recorded("gpu", overhead=0.4, epoch=0.05, first_worker_s=(4.5, 0.0), run="gpu")
    (found,) = compare([cpu, gpu], PRICES).verdicts
    assert found.cost_ratio < 1 and "costs " in found.text
    assert found.text.endswith("epochs it is also cheaper (projected)")


def test_too_few_trials_give_no_interval_and_say_why():
    (found,) = compare(list(pair(trials=2)), PRICES).verdicts
    assert found.interval is None
    assert "(no interval: 2 trials: too few for an interval; use --repeats 2)" in found.text


def test_the_run_to_run_spread_comes_from_earlier_runs_of_the_same_search_or_the_floor():
    cpu = recorded("cpu", overhead=0.5, epoch=2.0, first_worker_s=(3.0, 0.0), run="now")
    assert spread.run_to_run(cpu).source.startswith("measured floor")
    earlier = [recorded("cpu", overhead=0.5, epoch=e, first_worker_s=(3.0, 0.0), run=f"r{e}") for e in (1.5, 2.6)]
    seen = spread.run_to_run(cpu, earlier)
    assert "2 earlier runs of this search" in seen.source and seen.pace > spread.floor("cpu").pace
    # A run of another size is not the same search: the floor stays.
    other = [recorded("cpu", overhead=0.5, epoch=2.0, first_worker_s=(3.0, 0.0), run=f"x{n}", trials=3) for n in "ab"]
    assert spread.run_to_run(cpu, other).source.startswith("measured floor")


def test_one_search_is_projected_to_another_size_on_its_own():
    cpu, _ = pair()
    projected = project_search(cpu, 0.8, spread.floor("cpu"), {"epochs": 20})
    # One-off parts held, each trial at its steady cost (0.5 + 20 x 2 s), 4 trials one at a time.
    held = cpu.metrics["makespan_s"] - 4 * (0.5 + 4 * 2.0)
    assert projected.makespan_s.value == pytest.approx(held + 4 * (0.5 + 20 * 2.0), rel=0.01)
    assert projected.makespan_s.low < projected.makespan_s.value < projected.makespan_s.high
    assert projected.cost == pytest.approx(projected.makespan_s.value / 3600 * 0.8)
    text = verdict.of_search(projected)
    assert text.startswith(f"verdict: this search ({cpu.label}) would take ")
    assert "for 4 configurations x 20 epochs (projected from its run)" in text


def test_what_cannot_be_projected_is_refused_in_one_line():
    failed = recorded("cpu", overhead=0.5, epoch=2.0, first_worker_s=(3.0, 0.0), failed=1)
    with pytest.raises(UserError, match="1 trial\\(s\\) did not finish.*--resume"):
        project_search(failed, 0.8, spread.floor("cpu"), {"epochs": 20})
    single = recorded("cpu", overhead=0.5, epoch=2.0, first_worker_s=(3.0, 0.0), trials=1)
    with pytest.raises(UserError, match="one trial cannot tell"):
        project_search(single, 0.8, spread.floor("cpu"), {"epochs": 20})


def test_the_interval_widens_with_the_run_to_run_spread():
    cpu, gpu = pair()
    narrow = compare([cpu, gpu], PRICES).verdicts[0].interval
    wide_floor = spread.Spread(0.3, 5.0, "test")
    rows = {r.label: r for r in compare([cpu, gpu], PRICES).pairings[0].projection.rows}
    assert narrow[0] < rows["as run"].speedup.value < narrow[1]
    assert math.log(narrow[1] / narrow[0]) < 2 * 1.96 * math.hypot(wide_floor.pace, wide_floor.pace)
