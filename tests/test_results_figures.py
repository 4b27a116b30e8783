"""Every published figure traced to raw output (tests/figures.py says what traces): each docs/results page names
its raw files and they exist, each figure on it is in them or declared (a setting, a computation checked here, or
a known debt), and README's figures trace to the pages it links. Reads files only: no process, about a second."""

from __future__ import annotations

import pytest
from figures import RESULTS, check_page, check_readme, figures_in

PAGES = sorted(p for p in RESULTS.glob("*.md") if p.name != "index.md")


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_a_results_page_names_its_raw_files_and_every_figure_traces_to_them(page):
    problems = check_page(page)
    assert not problems, f"{page.name}:\n" + "\n".join(problems)


def test_readmes_figures_trace_to_the_results_pages_it_links():
    problems = check_readme()
    assert not problems, "README.md:\n" + "\n".join(problems)


def _page(tmp_path, body: str, raw: str = "2 runs: makespan 12.34 s, speedup 3.17, 1208.5 s in all\n") -> tuple:
    (tmp_path / "run").mkdir(parents=True)
    (tmp_path / "run" / "log.txt").write_text(raw)
    page = tmp_path / "run.md"
    page.write_text(f"# A run\n\nRaw files: `run/`.\n\n{body}\n")
    return page, tmp_path


def test_a_figure_in_the_raw_files_traces_and_one_in_none_fails(tmp_path):
    page, base = _page(tmp_path, "The makespan was 12.3 s (3.17x; 1,208.5 s of tests).")
    assert check_page(page, base) == []
    page, base = _page(tmp_path / "b", "The makespan was 12.3 s, the speedup 4.2x.")
    assert check_page(page, base) == ["4.2x: in no raw file, and not declared"]


def test_a_page_whose_raw_files_are_missing_or_unnamed_fails(tmp_path):
    page = tmp_path / "run.md"
    page.write_text("# A run\n\nRaw files: `gone/log.txt`.\n\nIt took 12.3 s.\n")
    assert check_page(page, tmp_path) == ["raw file gone/log.txt is missing"]
    page.write_text("# A run\n\nIt took 12.3 s.\n")
    assert check_page(page, tmp_path) == ["names no raw files (a line `Raw files: `path`, ...`)"]


def test_a_declared_computation_must_use_traced_numbers_and_give_the_figure(tmp_path):
    declared = "Twice as slow: 24.7 s.\n\n<!-- figures\n24.7 s = 12.34 * 2\n-->"
    assert check_page(*_page(tmp_path / "a", declared)) == []
    wrong = "Twice as slow: 25.0 s.\n\n<!-- figures\n25.0 s = 12.34 * 2\n-->"
    assert check_page(*_page(tmp_path / "b", wrong)) == ["25.0 s = 12.34 * 2: the expression gives 24.68"]
    invented = "Made up: 99.9 s.\n\n<!-- figures\n99.9 s = 12.34 * 8.1\n-->"
    assert check_page(*_page(tmp_path / "c", invented)) == ["99.9 s = 12.34 * 8.1: 8.1 in no raw file"]


def test_a_declared_computation_is_checked_even_where_the_figure_meets_a_raw_number_by_chance(tmp_path):
    # 3.17 is in the raw file, so the figure traces; the wrong expression declared for it must still fail.
    wrong = "A ratio of 3.17x.\n\n<!-- figures\n3.17x = 12.34 / 1208.5\n-->"
    assert check_page(*_page(tmp_path, wrong)) == ["3.17x = 12.34 / 1208.5: the expression gives 0.010211"]


def test_settings_and_quoted_output_are_not_figures_to_trace(tmp_path):
    body = "Trials sleep 0.5 s; `--timeout 30 s`.\n\n```\nmakespan 45.6 s\n```\n\nIt took 45.6 s.\n\n"
    body += "<!-- figures\ngiven: 0.5 s\n-->"
    assert check_page(*_page(tmp_path, body)) == []
    assert [f.text for f in figures_in("a 3.17x [2.65-3.65x] speedup, 95% of 8 min, 22 ms")] == [
        "3.17x", "2.65x", "3.65x", "95%", "8 min", "22 ms"]  # fmt: skip
    # A table's cells that hold a number alone are figures too (the unit is in the heading); a count in words is not.
    assert [f.text for f in figures_in("| GPUs | makespan s |\n|---|---|\n| 1 | **45.9** |\n| two | 32.1 s |")] == [
        "32.1 s", "1", "45.9"]  # fmt: skip


def test_a_computation_may_sum_a_durations_listing_among_the_raw_files(tmp_path):
    listing = "12.50s call     tests/test_a.py::test_one\n0.25s setup    tests/test_a.py::test_one\n"
    page, base = _page(tmp_path, "The workers' time: 12.8 s.\n\n<!-- figures\n12.8 s = durations(\"run/log.txt\")\n-->",
                       raw=listing)  # fmt: skip
    assert check_page(page, base) == []
    page.write_text(page.read_text().replace("12.8 s", "13.8 s"))
    assert check_page(page, base) == ['13.8 s = durations("run/log.txt"): the expression gives 12.75']
