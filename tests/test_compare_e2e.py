"""Compare end to end: two real `digits` searches, the comparison in MLflow, the UI in a real browser, and
the account of each search against its wall time, with a projection checked against the larger pair run."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from in_process import gridbench_main
from stores import new_store
from test_search import runs_of

from gridbench import account
from gridbench.tracking import read_search, schema

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("GRIDBENCH_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


def gridbench(*args, cwd):
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", *args], capture_output=True, text=True, timeout=900, cwd=cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def timed_search(store: str, cwd, epochs: int, cores: str) -> tuple[str, float]:
    """`gridbench search digits` on JAX with no compile cache, as a user runs it: its parent run and its wall time."""
    start = time.perf_counter()
    result = gridbench("search", "digits", "--cpus-per-trial", cores, "--backend", "jax", "--set", f"epochs={epochs}",
                       "--compile-cache", "off", "--tracking-uri", store, cwd=cwd)  # fmt: skip
    wall = time.perf_counter() - start
    assert "Where the whole command's" in result.stdout
    run_id = result.stdout.split("parent run ")[1].split()[0]
    OUTPUTS[run_id] = result.stdout
    return run_id, wall


OUTPUTS: dict[str, str] = {}  # each search's output, by its parent run


# A CPU pair on this machine's two cores: one trial per core against a trial on both.
CORES = ("1", "2")


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory) -> tuple[Path, list[tuple[str, float]]]:
    """Two CPU searches of digits (1 and 2 cores per trial, 2 epochs) in one store: its directory, (run, wall) each."""
    directory = tmp_path_factory.mktemp("compare")
    store = new_store(directory)
    return directory, [timed_search(store, directory, 2, cores) for cores in CORES]


@pytest.fixture(scope="module")
def compared(small_pair):
    """The two searches and their comparison, as JSON, with an HTML page beside the store."""
    directory, searches = small_pair
    store = f"sqlite:///{directory / 'mlflow.db'}"
    ids = [run_id for run_id, _ in searches]
    page = directory / "page.html"
    code, out, err = gridbench_main(
        "compare", *ids, "--format", "json", "--tracking-uri", store, "--html", str(page), cwd=directory
    )
    assert code == 0, out + err
    return store, ids, json.loads(out)


def test_the_whole_search_speedup_is_the_ratio_of_the_makespans_in_mlflow(compared):
    store, (one_core, two_cores), document = compared
    client, parents, children = runs_of(store, "digits")
    makespan = {r.info.run_id: r.data.metrics["makespan_s"] for r in parents if r.info.run_id in (one_core, two_cores)}
    (pairing,) = document["pairings"]
    assert pairing["makespan_speedup"] == pytest.approx(makespan[one_core] / makespan[two_cores], rel=1e-12)
    assert document["baseline"] == one_core and pairing["other"] == two_cores
    assert len(pairing["configurations"]) == 4  # every configuration paired
    assert all(c["repeats"] == [1, 1] for c in pairing["configurations"].values())


def test_the_comparison_is_its_own_run_with_plots_tables_and_links(compared):
    store, ids, document = compared
    client, parents, _ = runs_of(store, "digits")
    (comparison,) = [r for r in parents if r.data.tags.get("gridbench.kind") == "comparison"]
    assert comparison.data.tags["compare.runs"] == ",".join(ids)
    assert comparison.data.metrics["makespan_speedup"] == pytest.approx(document["pairings"][0]["makespan_speedup"])
    artifacts = {a.path for a in client.list_artifacts(comparison.info.run_id)}
    assert {"comparison.json", "comparison.md", "comparison.csv", "plots"} <= artifacts
    plots = {a.path for a in client.list_artifacts(comparison.info.run_id, "plots")}
    assert plots == {
        f"plots/{name}" for name in ("relative_time_cost.png", "speedup_per_config.png", "speedup_heatmap.png")
    }
    for search_run in (r for r in parents if r.info.run_id in ids):
        assert search_run.data.tags["gridbench.compared_in"] == comparison.info.run_id


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1500,1000", "--virtual-time-budget=30000"]  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("GRIDBENCH_REQUIRE_BROWSER"):
            pytest.fail("chromium is required here (GRIDBENCH_REQUIRE_BROWSER) but not installed")
        pytest.skip("no chromium (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def served_ui(compared):
    """`gridbench ui` on the pair's store, opened on digits: its process and the line with its URL. One server for the
    browser's test and then the SIGTERM test (each start of it imports MLflow and starts its server and web worker)."""
    store, _, _ = compared
    ui = subprocess.Popen(
        [sys.executable, "-m", "gridbench", "ui", "--port", "0", "--tracking-uri", store, "--experiment", "digits"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        line, deadline = "", time.monotonic() + 180
        while "MLflow UI" not in line and time.monotonic() < deadline:
            line = ui.stdout.readline() or line
        assert "MLflow UI" in line
        yield ui, line
    finally:
        if ui.poll() is None:  # the SIGTERM test did not run: stopped as it stops it
            ui.terminate()
            try:
                ui.wait(timeout=30)
            except subprocess.TimeoutExpired:
                ui.kill()


def test_the_ui_lists_the_searches_and_the_comparison_in_a_real_browser(compared, served_ui, tmp_path):
    import requests

    browser = chromium()
    store, ids, _ = compared
    client, parents, _ = runs_of(store, "digits")
    (comparison,) = [r for r in parents if r.data.tags.get("gridbench.kind") == "comparison"]
    ui, line = served_ui
    assert ui.poll() is None, "the ui stopped before the browser opened it"
    url = re.search(r"http://127\.0\.0\.1:\d+/#/experiments/\d+/runs\S*", line).group(0)
    assert "workflowType=machine_learning" in url and "orderByKey" not in url  # unsorted: trials nested

    profile = tmp_path / "chromium"
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=180).stdout  # fmt: skip
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style).*?</\1>", "", dom, flags=re.S)))
    assert text.count("digits cpu jax") >= 2, text[:2000]  # both searches' parent runs
    assert comparison.info.run_name in text

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "mlflow-ui-runs.png"
    subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={screenshot}", url],
                   capture_output=True, timeout=180, check=True)  # fmt: skip
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    base = url.split("/#/")[0]
    for name in ("relative_time_cost.png", "speedup_per_config.png", "speedup_heatmap.png"):
        served = requests.get(
            f"{base}/get-artifact", params={"path": f"plots/{name}", "run_uuid": comparison.info.run_id}, timeout=30
        )
        assert served.status_code == 200 and served.content[:8] == b"\x89PNG\r\n\x1a\n", name


def test_the_html_report_shows_the_headline_and_every_chart_offline_in_a_real_browser(compared, tmp_path):
    browser = chromium()
    store, ids, document = compared
    page = Path(store[len("sqlite:///") :]).parent / "page.html"
    source = page.read_text()
    # Self-contained: nothing to fetch (no scripts, styles, images or fonts from anywhere); links to the
    # MLflow UI (<a href>) fetch nothing until followed.
    assert not re.search(r"""src=["']?(https?:)?//""", source) and "<script" not in source
    assert not re.search(r"""<link[^>]*href=["']?(https?:)?//""", source)
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'chromium'}"]
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, *offline, "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout  # fmt: skip
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style|svg).*?</\1>", "", dom, flags=re.S)))
    speedup = document["pairings"][0]["makespan_speedup"]
    assert "whole search as run (makespans)" in text and f"{speedup:.3g}x" in text
    assert text.index("verdict: ") < text.index("whole search as run (makespans)")  # the verdict heads the page
    for chart in ("phases", "relative_time_cost", "speedup_per_config", "speedup_heatmap"):
        assert re.search(rf'id="chart-{chart}"><svg', dom), chart
    assert all(run_id in text for run_id in ids) and "Where the baseline won" in text and "Environment" in text
    screenshot = ARTIFACTS / "comparison-report.png"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    subprocess.run([browser, *CHROMIUM_FLAGS, *offline, f"--screenshot={screenshot}", page.as_uri()],
                   capture_output=True, timeout=180, check=True)  # fmt: skip
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_writes_any_search_or_comparison_as_one_page(compared, tmp_path):
    store, ids, _ = compared
    _, parents, children = runs_of(store, "digits")
    (comparison,) = [r for r in parents if r.data.tags.get("gridbench.kind") == "comparison"]
    logged = gridbench("report", comparison.info.run_id, "--html", "c.html", "--tracking-uri", store, cwd=tmp_path)
    assert logged.stdout.strip() == f"comparison {comparison.info.run_id}: c.html"
    page = (tmp_path / "c.html").read_text()
    # The report.html the comparison logged: the whole commands' account, the phases, time and cost, the
    # per-configuration speedups and heatmap, and the projection's two panels.
    assert page.count("<svg") == 6 and "Where the baseline won" in page
    assert gridbench_main("report", ids[0], "--tracking-uri", store, cwd=tmp_path)[0] == 0
    search_page = (tmp_path / f"gridbench-search-{ids[0][:8]}.html").read_text()
    assert 'id="chart-phases"><svg' in search_page and "Where the time goes" in search_page
    assert all(
        child.data.tags["config_key"] in search_page
        for child in children
        if child.data.tags.get("mlflow.parentRunId") == ids[0]
    )
    command = [sys.executable, "-m", "gridbench", "report", children[0].info.run_id, "--tracking-uri", store]
    trial = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert trial.returncode == 2 and trial.stderr.count("\n") == 1 and "is a trial run" in trial.stderr


def test_the_ui_stops_its_server_on_sigterm(served_ui):
    """The ui the browser read (after that test, if it ran): SIGTERM ends it, its server and the server's worker."""
    import signal

    import psutil

    ui, _ = served_ui
    assert ui.poll() is None
    started = psutil.Process(ui.pid).children(recursive=True)  # the server and its web worker
    assert started
    ui.send_signal(signal.SIGTERM)
    assert ui.wait(timeout=60) == 0
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [p.cmdline() for p in alive]


def test_the_account_adds_up_to_the_command_as_measured_from_outside(small_pair):
    """The account against real searches: each search's whole command, as it recorded it and as its parts add up,
    against this test's clock around the subprocess. (Whether a projection holds when the projected pair runs is
    measured by benchmarks/projection_check_cpu.sh, or benchmarks/projection_check.sh on a GPU, not asserted
    here: on a shared runner it is a timing.)"""
    directory, small = small_pair
    store = f"sqlite:///{directory / 'mlflow.db'}"
    for run_id, wall in small:
        recorded = read_search(store, run_id).metrics
        parts = account.Account.from_metrics(recorded)
        assert parts is not None
        assert recorded[schema.WHOLE_COMMAND_S] == pytest.approx(wall, rel=0.02)
        assert parts.whole_command_s == pytest.approx(wall, rel=0.02)
        assert min(parts.parts().values()) >= 0 and parts.training_s > 0 and parts.startup_s > 0


def test_a_search_ends_with_a_command_that_projects_it_and_compare_ends_with_the_verdict(small_pair, tmp_path):
    """The search's last line, pasted, projects that one search; a pair's comparison ends with its verdict."""
    directory, searches = small_pair
    store = f"sqlite:///{directory / 'mlflow.db'}"
    (first, _), (second, _) = searches
    hint = OUTPUTS[first].strip().splitlines()[-1]
    assert hint.startswith("What it would take at another size (projected): python -m gridbench compare ")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # `python` is this one
    pasted = subprocess.run(hint.split(": ", 1)[1], shell=True, capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PATH": path})  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr
    last = pasted.stdout.strip().splitlines()[-1]
    assert last.startswith("verdict: this search (") and "for 4 configurations x 20 epochs (projected" in last
    alone = subprocess.run([sys.executable, "-m", "gridbench", "compare", first, "--tracking-uri", store],
                           capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 2 and alone.stderr.count("\n") == 1 and "or one with --project" in alone.stderr
    code, out, _ = gridbench_main("compare", first, second, "--tracking-uri", store, "--no-log", cwd=tmp_path)
    assert code == 0 and out.strip().splitlines()[-1].startswith("verdict: cpu (2 cores/trial) ")
