"""Reading a comparison in MLflow's UI, in a real browser: a pair of searches recorded without Ray.

The searches are written through gridbench's own recorder (MlflowRecorder) with fixed trials,
compared with `gridbench compare`, then `gridbench ui` serves the store and chromium opens the
URL it prints and the compare view it links.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from in_process import gridbench_main
from stores import new_store
from test_compare_e2e import ARTIFACTS, CHROMIUM_FLAGS, chromium

from gridbench.account import PARTS
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder

GRID = {"hidden_units": ["64", "256"], "learning_rate": ["0.001", "0.01"]}


def record_search(store: str, device: str, speed: float) -> str:
    """One search of 4 configurations, as a search of `device` records it (params and tags of schema 6)."""
    recorder = MlflowRecorder(store, "digits")
    placement = {"device": device, "backend": "jax", "cpus_per_trial": 1, "gpus_per_trial": "0"}
    tags = {schema.KIND: "search", schema.SPEC_NAME: "digits", schema.DATASET: "digits", schema.MODEL: "keras_mlp",
            schema.METRIC: "test_accuracy", schema.METRIC_MODE: "max", schema.METRIC_TARGET: "",
            schema.DATA_SYNTHETIC: "false", schema.TIMING_TRAIN: "steady_epoch_s", schema.DEVICE: device,
            schema.BACKEND: "jax", schema.CPUS_PER_TRIAL: "1", schema.GPUS_PER_TRIAL: "0", schema.GPUS_USED: "0",
            schema.CPU_CORES_USABLE: "2", schema.DRIVER_PID: "1"}  # fmt: skip
    params = {"epochs": 3, **{f"grid.{k}": v for k, v in GRID.items()}, "repeats": 1, "seed": 0, **placement}
    parent = recorder.start(f"digits {device} jax", params, tags, {})
    now = time.time()
    for i, (units, rate) in enumerate((u, r) for u in GRID["hidden_units"] for r in GRID["learning_rate"]):
        steady = (0.01 + 0.002 * i) / speed
        metrics = {"test_accuracy": 0.9 + 0.01 * i, "steady_epoch_s": steady, "trial_wall_s": 2 + 10 * steady,
                   "fit_s": 4 * steady, "warmup_epoch_s": steady, "import_s": 1.0, "eval_s": 0.01}  # fmt: skip
        config = {"hidden_units": units, "learning_rate": rate}
        record = TrialRecord(f"t{i}", config, 0, "FINISHED", metrics, {schema.DEVICE_ACTUAL: f"{device}:0"},
                             now + i, now + i + 1)  # fmt: skip
        recorder.record_trial(record, {"epochs": 3, **placement}, {schema.KIND: "trial", schema.DEVICE: device})
    parts = {"startup_s": 2.0, "worker_start_s": 0.5, "trial_overhead_s": 0.5, "warmup_s": 0.5, "end_s": 0.5}
    account = {**dict.fromkeys(PARTS, 0.0), **parts, "training_s": 10.0 / speed - 2.0}  # 12 s and 7 s in all
    summary = SearchSummary(4, 4, 0, 1, 10.0 / speed, 1.0, 2.0, 8.0, 0.93, account=account)
    recorder.finish(summary, SearchStatus.FINISHED)
    return parent


def gridbench(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gridbench", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def recorded_pair(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ui")
    store = new_store(directory)
    ids = [record_search(store, "cpu", 1.0), record_search(store, "cpu", 2.0)]
    compare = ["compare", *ids, "--tracking-uri", store, "--html", "report.html", "--project", "configs=16"]
    compared = gridbench(*compare, cwd=directory)
    assert compared.returncode == 0, compared.stderr
    return store, ids, compared.stdout, directory


def text_of(dom: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style|svg).*?</\1>", "", dom, flags=re.S)))


def browse(browser: str, url: str, profile, *extra) -> str:
    command = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, "--dump-dom", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=180).stdout


def served(store: str):
    """`gridbench ui` on a free port: (process, the lines it printed, stdout and stderr together, before "Ctrl-C")."""
    ui = subprocess.Popen([sys.executable, "-m", "gridbench", "ui", "--port", "0", "--tracking-uri", store],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines, deadline = [], time.monotonic() + 180
    while time.monotonic() < deadline:
        line = ui.stdout.readline()
        lines.append(line)
        if not line or line.startswith("Ctrl-C"):
            break
    return ui, lines


def test_the_ui_opens_on_nested_trials_with_the_comparison_columns_and_links_the_compare_view(recorded_pair, tmp_path):
    browser = chromium()
    store, ids, _, _ = recorded_pair
    ui, lines = served(store)
    try:
        (runs,) = [re.search(r"http://\S+", line).group(0) for line in lines if line.startswith("MLflow UI")]
        (compare,) = [re.search(r"http://\S+", line).group(0) for line in lines if line.startswith("compare view")]
        assert "workflowType=machine_learning" in runs and "orderByKey" not in runs  # unsorted: trials nest
        assert "viewStateShareKey=gridbench-comparison" in runs
        # Its own lines only: MLflow's and uvicorn's go to the log file the first line names.
        assert lines[0].startswith("MLflow's own lines") and len(lines) == 6, (
            lines
        )  # log, page, banner, compare, report, Ctrl-C
        assert not [line for line in lines if re.search(r"INFO|WARNING|Warning|Registry|GET /", line)], lines
        assert 'banner "You\'re viewing a shared view"' in lines[2]  # why MLflow shows it, in one line
        # A full-HD window: the search's own figures add three columns to the view (a narrower one scrolls).
        dom = browse(browser, runs, tmp_path / "chromium", "--window-size=1920,1000")
        text = text_of(dom)
        log = Path(re.search(r"go to (\S+)", lines[0]).group(1)).read_text()
        assert '"GET /health HTTP/1.1" 200' in log  # the server's lines, kept
        # Nesting: each search's row has an expander for its 4 trials; no trial is listed on its own.
        assert text.count("digits cpu jax") >= 2, text[:3000]
        assert "learning_rate=0.001 #0" not in text, text[:3000]
        (tmp_path / "dom.html").write_text(dom)
        # MLflow's expander, an icon button in the run-name cell, on the two searches (not on the comparison).
        assert len(re.findall(r'<button data-component-id="[^"]*runnamecellrenderer[^"]*"', dom)) == 2, dom[-3000:]
        # The saved view's columns, without a click: accuracy, timings, device, backend, the grid's axes.
        for column in ("test_accuracy", "steady_epoch_s", "trial_wall_s", "device", "hidden_units", "learning_rate"):
            assert f'data-testid="sort-header-{column}"' in dom, column
        # A search's row shows its own figures: best metric, makespan (10 s and 5 s), the whole command's time.
        for column in ("best_metric", "makespan_s", "whole_command_s"):
            assert f'data-testid="sort-header-{column}"' in dom, column
        # (MLflow orders metric columns by name: best_metric, makespan_s, the trials', whole_command_s.)
        assert re.search(r"digits cpu jax [^#]*?\b0\.93\s+10\s+(-\s+)*12\b", text), text[-3000:]
        assert re.search(r"digits cpu jax [^#]*?\b0\.93\s+5\s+(-\s+)*7\b", text), text[-3000:]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = [f"--screenshot={ARTIFACTS / 'mlflow-ui-comparison.png'}"]
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *shot, runs],
                       capture_output=True, timeout=180, check=True)  # fmt: skip

        view = text_of(browse(browser, compare, tmp_path / "chromium"))
        (tmp_path / "view.txt").write_text(view)
        assert all(run_id in view for run_id in ids), view[:3000]  # both searches, side by side
        assert "device" in view and "cpus_per_trial" in view, view[:3000]  # placement as params
        assert re.search(r"Metrics:\s*makespan_s", view), view[:3000]  # the chart's default: a timing that matters
        shot = [f"--screenshot={ARTIFACTS / 'mlflow-compare-view.png'}"]
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *shot, compare],
                       capture_output=True, timeout=180, check=True)  # fmt: skip
    finally:
        ui.terminate()
        ui.wait(timeout=30)


def test_compare_prints_the_compare_view_of_the_searches_and_no_log_logs_nothing(recorded_pair):
    from mlflow import MlflowClient

    store, ids, stdout, directory = recorded_pair
    (line,) = [line for line in stdout.splitlines() if line.startswith("side by side in MLflow")]
    assert line.endswith(f"#/compare-runs?runs=%5B%22{ids[0]}%22%2C%22{ids[1]}%22%5D&experiments=%5B%221%22%5D")
    page = (directory / "report.html").read_text()
    assert "compare-runs?runs=%5B%22" in page and "Where the baseline won" in page
    client = MlflowClient(store)
    before = len(client.search_runs(["1"], filter_string="tags.`gridbench.kind` = 'comparison'"))
    code, out, _ = gridbench_main("compare", *ids, "--tracking-uri", store, "--no-log", cwd=directory)
    assert code == 0 and "comparison not logged (--no-log)" in out
    assert len(client.search_runs(["1"], filter_string="tags.`gridbench.kind` = 'comparison'")) == before == 1


def test_the_report_of_a_cpu_pair_says_where_the_baseline_won_and_links_mlflow(recorded_pair, tmp_path):
    browser = chromium()
    _, _, _, directory = recorded_pair
    page = directory / "report.html"
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'chromium'}"]
    text = text_of(browse(browser, page.as_uri(), tmp_path / "chromium", *offline[:1]))
    assert "Where the baseline won" in text and "Nowhere" in text  # the 2-core search won on every configuration
    assert "cost ratio = the baseline's cost / the other's cost" in text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = f"--screenshot={ARTIFACTS / 'comparison-report-pair.png'}"
    subprocess.run([browser, *CHROMIUM_FLAGS, *offline, shot, page.as_uri()], capture_output=True, timeout=180,
                   check=True)  # fmt: skip


# Run in the page by chromium: for each chart, the text its legend box overlaps, each legend entry's colour, and
# the text drawn on it (the charts' text is SVG text: gridbench.page.chart).
MEASURE = """<script>
const out = [];
for (const chart of document.querySelectorAll('.chart')) {
  const legends = [...chart.querySelectorAll('g[id^="legend_"]')];
  const boxes = legends.map(g => g.getBoundingClientRect());
  const texts = [...chart.querySelectorAll('text')].filter(t => t.textContent.trim());
  const outside = texts.filter(t => !legends.some(g => g.contains(t)));
  const overlaps = [];
  for (const t of outside) {
    const r = t.getBoundingClientRect();
    for (const b of boxes) {
      if (r.left < b.right && b.left < r.right && r.top < b.bottom && b.top < r.bottom) overlaps.push(t.textContent);
    }
  }
  const entries = {};
  for (const g of legends) {
    let fill = null;
    for (const child of g.children) {
      const path = child.querySelector('path'), text = child.querySelector('text');
      if (path && !text) {
        const m = (path.getAttribute('style') || '').match(/fill: (#[0-9a-f]{6})/);
        fill = m && m[1];
      }
      else if (text && fill) { entries[text.textContent] = fill; fill = null; }
    }
  }
  out.push({chart: chart.id, overlaps, entries, texts: texts.map(t => t.textContent)});
}
const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def rendered_charts(browser: str, page, profile) -> list[dict]:
    """What chromium drew of a report's charts (MEASURE), the page otherwise as written."""
    import json

    measured = page.with_name(f"measured-{page.name}")
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = browse(browser, measured.as_uri(), profile, "--host-resolver-rules=MAP * ~NOTFOUND")
    return json.loads(html.unescape(re.search(r'<pre id="measured">(.*?)</pre>', dom, flags=re.S).group(1)))


def check_charts(charts: list[dict]) -> None:
    """Legends clear of every other text; plain tick labels; each part of the time in its one colour."""
    from gridbench.account import PART_COLOURS, PART_LABELS
    from gridbench.comparison.html import PHASE_PARTS

    part_of = {**{label: part for part, label in PART_LABELS.items()}, **PHASE_PARTS}
    for chart in charts:
        assert chart["overlaps"] == [], chart
        # Matplotlib's log formatter draws 2x10^-1 as mathtext: "2", "×", "1", "0", "−", "1" in one text.
        assert not [t for t in chart["texts"] if re.search(r"10\^|×10|\\times", re.sub(r"\s", "", t))], chart["texts"]
        for label, colour in chart["entries"].items():
            if label in part_of:
                assert colour == PART_COLOURS[part_of[label]], (chart["chart"], label, colour)


def test_the_reports_charts_as_rendered_one_colour_per_part_legends_clear_plain_ticks_no_line_twice(
    recorded_pair, tmp_path
):
    browser = chromium()
    store, ids, _, directory = recorded_pair
    page = directory / "report.html"
    charts = rendered_charts(browser, page, tmp_path / "chromium")
    names = [c["chart"] for c in charts]
    assert {"chart-account", "chart-phases", "chart-speedup_per_config", "chart-projection"} <= set(names), names
    check_charts(charts)
    legends = {label: colour for chart in charts for label, colour in chart["entries"].items()}
    assert legends["compile / warm-up epoch"] == legends["warm-up beyond a steady epoch"]  # orange in both
    assert legends["training"] == legends["training (steady epochs)"]
    speedup = next(c for c in charts if c["chart"] == "chart-speedup_per_config")
    assert [t for t in speedup["texts"] if re.fullmatch(r"\d+(\.\d+)?", t)], speedup["texts"]  # plain numbers
    # Nothing printed twice: no bullet of the page repeats another (the break-even lines, the projection's caveat).
    items = [text_of(item).strip() for item in re.findall(r"<li>(.*?)</li>", page.read_text(), flags=re.S)]
    assert [item for item in items if items.count(item) > 1] == []
    assert sum("break-even" in item for item in items) >= 1

    # A search's page: its whole command's account, above its trials' phases, in the same colours.
    code, _, err = gridbench_main("report", ids[0], "--tracking-uri", store, "--html", "search.html", cwd=directory)
    assert code == 0, err
    search = directory / "search.html"
    charts = rendered_charts(browser, search, tmp_path / "chromium")
    assert [c["chart"] for c in charts] == ["chart-account", "chart-phases"]
    check_charts(charts)
    text = " ".join(text_of(search.read_text()).split())
    assert "start-up (command to first trial) 2.00" in text and "whole command 12.00" in text


def test_the_scale_pages_chart_as_rendered_keeps_its_legend_clear(tmp_path):
    from test_reports import scale_result

    from gridbench.scale import report as scale_report

    page = tmp_path / "scale.html"
    page.write_text(scale_report.page(scale_result(), "sqlite:///x.db"))
    (chart,) = rendered_charts(chromium(), page, tmp_path / "chromium")
    check_charts([chart])
    assert {"ideal (linear)", "parallel efficiency", "training share"} <= set(chart["texts"])
