"""A comparison's files (plots, tables, the HTML page) and its own MLflow run.

Beside report.py (tables and figures) and html.py (the page), which it writes out together.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from gridbench.comparison import html, report
from gridbench.comparison.pairing import Comparison
from gridbench.page import REPORT_PAGE
from gridbench.tracking import record_comparison


def write_files(comparison: Comparison, directory: Path, tracking_uri: str) -> dict[str, Path]:
    """Plots, the three table formats and the HTML page; returns artifact name -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    files = report.plot(comparison, directory / "plots")
    for fmt, name in (("markdown", "comparison.md"), ("csv", "comparison.csv"), ("json", "comparison.json")):
        (directory / name).write_text(report.render(comparison, fmt))
        files[name] = directory / name
    files[REPORT_PAGE] = directory / REPORT_PAGE
    files[REPORT_PAGE].write_text(html.comparison_page(comparison, tracking_uri), encoding="utf-8")
    return files


def record(comparison: Comparison, run_ids: list[str], tracking_uri: str, out_dir: Path | str | None = None) -> str:
    """Logs the comparison to MLflow as its own run, with its files; returns that run's id.

    The files go to `out_dir` when given (and stay there), else to a directory removed once logged.
    """
    with tempfile.TemporaryDirectory(prefix="gridbench-compare-") as scratch:
        files = write_files(comparison, Path(out_dir) if out_dir else Path(scratch), tracking_uri)
        return record_comparison(
            tracking_uri,
            comparison.experiment,
            run_ids,
            report.headline_metrics(comparison),
            report.comparison_tags(comparison),
            files,
        )
