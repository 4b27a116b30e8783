"""What a comparison's and a scale's summary runs record in MLflow: metrics, tags, run name, files."""

from __future__ import annotations

import json

import pytest
from test_compare import PRICES, cpu_and_gpu, search, with_training_share
from test_scale import summary, trial

from gridbench.comparison import artifacts as compare_artifacts
from gridbench.comparison import compare
from gridbench.comparison import html as compare_html
from gridbench.comparison import report as compare_report
from gridbench.comparison.prices import PriceTable
from gridbench.scale import ScaleRequest, ScaleResult
from gridbench.scale import report as scale_report
from gridbench.scale.scale_runner import scale_rows
from gridbench.spec import load_spec


def test_one_pairing_gives_unsuffixed_headline_metrics():
    headline = compare_report.headline_metrics(compare(cpu_and_gpu(), PRICES))
    # The figures test_compare checks: makespans 100 s vs 25 s, $0.80/h vs $3.80/h.
    assert headline == {
        "makespan_speedup": pytest.approx(4.0),
        "geomean_train_speedup": pytest.approx(10.0),
        "geomean_wall_speedup": pytest.approx((5 * 5 * 0.5) ** (1 / 3)),
        "relative_cost": pytest.approx(3.8 / 3.2),
        "configs_cpu_faster": 1.0,
        "configs_cpu_cheaper": 1.0,
    }


def test_training_shares_are_headline_metrics_and_cards_where_the_searches_recorded_them():
    comparison = compare(with_training_share(0.4213), PRICES)
    headline = compare_report.headline_metrics(comparison)
    assert headline["other_training_share"] == 0.4213
    assert "baseline_training_share" not in headline  # the older CPU run lacks it: left out, not estimated
    page = compare_html.comparison_page(comparison, "sqlite:///x.db")
    assert "training share<b>0.42</b> (cpu (16 cores/trial) jax cpu-run: -)" in page
    search_page = compare_html.search_page(comparison.searches[1], "sqlite:///x.db")
    assert "training share<b>0.42</b>" in search_page
    assert "training share<b>-</b>" in compare_html.search_page(comparison.searches[0], "sqlite:///x.db")


def test_several_pairings_are_numbered_from_one_against_the_baseline():
    cpu, gpu = cpu_and_gpu()
    slower = search("gpu-2", "gpu", gpu.trials, makespan=50.0)
    headline = compare_report.headline_metrics(compare([cpu, gpu, slower], PRICES))
    assert sorted(headline) == sorted(
        f"{key}_{i}"
        for i in (1, 2)
        for key in ("makespan_speedup", "geomean_train_speedup", "geomean_wall_speedup", "relative_cost",
                    "configs_cpu_faster", "configs_cpu_cheaper")
    )  # fmt: skip
    assert headline["makespan_speedup_1"] == pytest.approx(4.0)
    assert headline["makespan_speedup_2"] == pytest.approx(2.0)
    assert headline["relative_cost_2"] == pytest.approx(2 * 3.8 / 3.2)  # twice as long at the same price


def test_an_unpriced_gpu_leaves_cost_out_of_the_headline_rather_than_zero():
    headline = compare_report.headline_metrics(
        compare(cpu_and_gpu(), PriceTable(cpu_core_hour=0.05, gpu_hour={}, source="none"))
    )
    assert "relative_cost" not in headline
    assert headline["configs_cpu_cheaper"] == 0.0 and headline["makespan_speedup"] == pytest.approx(4.0)


def test_comparison_tags_name_the_searches_the_prices_and_any_allowed_mismatch():
    cpu, gpu = cpu_and_gpu()
    assert compare_report.comparison_tags(compare([cpu, gpu], PRICES)) == {
        "search.0": "cpu (16 cores/trial) jax cpu-run",
        "search.1": "gpu x1 jax gpu-run",
        "prices.source": "test",
    }
    other = search("gpu-run", "gpu", gpu.trials, 25.0, backend="torch", dataset="digits")
    tags = compare_report.comparison_tags(compare([cpu, other], PRICES, allow_mismatch=True))
    assert tags["mismatches"] == (
        "dataset: mnist (cpu (16 cores/trial) jax cpu-run) vs digits (gpu x1 torch gpu-run); "
        "backend: jax (cpu (16 cores/trial) jax cpu-run) vs torch (gpu x1 torch gpu-run)"
    )


def test_record_writes_the_comparison_files_and_logs_them_with_its_figures(tmp_path, monkeypatch):
    logged = {}

    def fake_record(uri, experiment, run_ids, metrics, tags, files):
        logged.update(uri=uri, experiment=experiment, run_ids=run_ids, metrics=metrics, tags=tags, files=files)
        logged["existed"] = all(path.is_file() for path in files.values())
        return "summary-run"

    monkeypatch.setattr(compare_artifacts, "record_comparison", fake_record)
    comparison = compare(cpu_and_gpu(), PRICES)
    run_id = compare_artifacts.record(comparison, ["cpu-run", "gpu-run"], "sqlite:///x.db", tmp_path / "out")
    assert run_id == "summary-run" and logged["existed"]
    assert (logged["uri"], logged["experiment"], logged["run_ids"]) == (
        "sqlite:///x.db",
        "mnist",
        ["cpu-run", "gpu-run"],
    )
    assert logged["metrics"] == compare_report.headline_metrics(comparison)
    assert logged["tags"] == compare_report.comparison_tags(comparison)
    names = ["comparison.csv", "comparison.json", "comparison.md", "report.html"]
    names += [f"plots/{p}" for p in compare_report.PLOTS]
    assert sorted(logged["files"]) == sorted(names)
    assert all(logged["files"][name] == tmp_path / "out" / name for name in names)  # kept where asked
    assert json.loads((tmp_path / "out" / "comparison.json").read_text())["pairings"][0]["makespan_speedup"] == 4.0

    compare_artifacts.record(comparison, ["cpu-run", "gpu-run"], "sqlite:///x.db")
    assert logged["existed"] and not any(path.exists() for path in logged["files"].values())  # scratch removed


def scale_result(resource="gpu", counts=(1, 2, 4), data_parallel=False) -> ScaleResult:
    makespans = {1: 80.0, 2: 44.0, 4: 25.0}
    points = [(c, f"run-{c}", summary(makespans[c], c, 72.0, 40.0), [trial(9.0, 0.5)] * 8) for c in counts]
    labels = {"device": resource, "backend": "jax", "cpus_per_trial": "4", "gpus_per_trial": "1"}
    request = ScaleRequest(resource, counts, data_parallel)
    return ScaleResult(
        load_spec("digits"), request, "20250101-000000-abc123", tuple(scale_rows(points, "steady_epoch_s")), labels
    )


def test_scale_metrics_are_each_count_s_figures_suffixed_by_the_count():
    metrics = scale_report.scale_metrics(scale_result())
    assert list(metrics) == [
        f"{key}_{count}"
        for count in (1, 2, 4)
        for key in ("makespan_s", "throughput_per_h", "speedup", "efficiency", "training_share")  # no account: no
        # steady efficiency (left out, not logged as NaN)
    ]
    # 40 s of timed epochs in each search: over 80 s x 1, 44 s x 2 and 25 s x 4 of slot time.
    assert metrics["training_share_1"] == 0.5 and metrics["training_share_4"] == pytest.approx(0.4)
    assert metrics["training_share_2"] == pytest.approx(40 / 88)
    assert metrics["makespan_s_2"] == 44.0 and metrics["speedup_1"] == 1.0 and metrics["efficiency_1"] == 1.0
    assert metrics["speedup_4"] == pytest.approx(80 / 25) and metrics["efficiency_4"] == pytest.approx(0.8)
    assert metrics["throughput_per_h_4"] == pytest.approx(8 / 25 * 3600)


def test_scale_tags_link_the_searches_and_carry_what_every_count_shared():
    assert scale_report.scale_tags(scale_result(data_parallel=True)) == {
        "scale.id": "20250101-000000-abc123",
        "scale.resource": "gpu",
        "scale.counts": "1,2,4",
        "scale.data_parallel": "true",
        "scale.runs": "run-1,run-2,run-4",
        "scale.device": "gpu",
        "scale.backend": "jax",
        "scale.cpus_per_trial": "4",
        "scale.gpus_per_trial": "1",
    }
    assert scale_report.scale_tags(scale_result("cpu", (1, 2)))["scale.data_parallel"] == "false"


def test_scale_run_name_says_experiment_resource_counts_and_data_parallelism():
    assert scale_report.run_name(scale_result("cpu", (1, 2))) == "scale digits cpu 1,2"
    assert scale_report.run_name(scale_result(data_parallel=True)) == "scale digits gpu 1,2,4 data-parallel"


def test_scale_record_logs_the_summary_run_with_its_files(tmp_path, monkeypatch):
    logged = {}

    def fake_record(uri, spec_name, kind, run_name, run_ids, metrics, tags, files):
        logged.update(args=(uri, spec_name, kind, run_name, run_ids), metrics=metrics, tags=tags, files=files)
        return "summary-run"

    monkeypatch.setattr(scale_report, "record_summary", fake_record)
    result = scale_result("cpu", (1, 2))
    out = tmp_path / "deep" / "out"  # made on the way
    assert scale_report.record(result, "sqlite:///x.db", out) == "summary-run"
    assert logged["args"] == ("sqlite:///x.db", "digits", "scale", "scale digits cpu 1,2", ["run-1", "run-2"])
    assert logged["metrics"] == scale_report.scale_metrics(result)
    assert logged["tags"] == scale_report.scale_tags(result)
    assert list(logged["files"]) == ["scaling.png", "scale.md", "scale.csv", "scale.json", "report.html"]
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "scale.csv",
        "scale.json",
        "scale.md",
        "scaling.png",
    ]
    assert (out / "report.html").read_text().count("<svg") == 1  # the curve, inline
    assert (out / "scale.md").read_text() == scale_report.render(result, "markdown")
    # Training share in every output: 40 s of epochs over 80 s x 1 and 44 s x 2.
    assert "training share<b>0.45</b>" in (out / "report.html").read_text()  # at the largest count
    table = (out / "scale.md").read_text()
    assert "| efficiency | steady efficiency | Amdahl efficiency | training share |" in table
    assert "| 100% | - | - | 0.50 |" in table
    assert "| 91% | - | - | 0.45 |" in table
    assert [row["training_share"] for row in json.loads((out / "scale.json").read_text())["rows"]] == [
        0.5,
        pytest.approx(40 / 88),
    ]
    assert (out / "scale.csv").read_text().splitlines()[1].split(",")[
        9
    ] == "0.5"  # training_share, after the steady and Amdahl efficiencies


def test_a_scale_count_without_slot_time_shows_no_training_share():
    points = [(1, "run-1", summary(80.0, 0, 72.0, 40.0), [trial(9.0, 0.5)] * 8)]
    rows = tuple(scale_rows(points, "steady_epoch_s"))
    result = ScaleResult(load_spec("digits"), ScaleRequest("cpu", (1,), False), "id", rows, {})
    assert "training_share_1" not in scale_report.scale_metrics(result)
    assert json.loads(scale_report.render(result, "json"))["rows"][0]["training_share"] is None
    assert "| - |" in scale_report.render(result, "markdown")


def test_a_resumed_searchs_page_shows_every_sessions_makespan_and_labels_the_last_sessions_figures():
    from test_compare import search as search_run

    metrics = {"sessions": 2.0, "search_makespan_s": 30.0, "trials_finished": 6.0, "trials_total": 6.0}
    page = compare_html.search_page(search_run("r", "cpu", (), makespan=12.0, metrics=metrics), "sqlite:///x.db")
    assert "makespan, 2 sessions<b>30 s</b>" in page and "last session&#x27;s makespan<b>12 s</b>" in page
    assert "6 of 6" in page and "overhead ratio (last session)" in page
    once = compare_html.search_page(search_run("r", "cpu", (), makespan=12.0), "sqlite:///x.db")
    assert "makespan<b>12 s</b>" in once and "last session" not in once


def test_a_comparison_page_prints_each_note_once_and_keeps_those_no_section_showed():
    import re

    page = compare_html.comparison_page(compare(cpu_and_gpu(), PRICES), "sqlite:///x.db")
    items = re.findall(r"<li>(.*?)</li>", page)
    assert [item for item in items if items.count(item) > 1] == []
    # No account recorded: its section shows none, so the speedup line stays among the notes, once.
    assert sum("whole search as run" in item for item in items) == 1
