"""compare in the terminal: tables that fit 80 and 120 columns, no value cut; MLflow's compare-view link."""
# ruff: noqa: E501  (the 120-column table is 120 characters wide, with its quotes more)

from __future__ import annotations

import pytest
from rich.console import Console
from test_compare import PRICES, cpu_and_gpu

from gridbench.comparison import compare
from gridbench.comparison import report as compare_report
from gridbench.tracking.ui import compare_runs_url

AT_80 = (
    "                             mnist: whole searches                             \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓\n"
    "┃                                  ┃ makespan ┃ relative ┃            time to ┃\n"
    "┃ search                           ┃        s ┃     time ┃ test_accuracy 0.95 ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩\n"
    "│ cpu (16 cores/trial) jax cpu-run │      100 │        1 │                 42 │\n"
    "│ gpu x1 jax gpu-run               │       25 │     0.25 │                  9 │\n"
    "└──────────────────────────────────┴──────────┴──────────┴────────────────────┘\n"
    "                         continued (rows by search)                         \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓\n"
    "┃                                  ┃        ┃   cost ┃ relative ┃ training ┃\n"
    "┃ search                           ┃ $/hour ┃      $ ┃     cost ┃    share ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩\n"
    "│ cpu (16 cores/trial) jax cpu-run │    0.8 │ 0.0222 │        1 │        - │\n"
    "│ gpu x1 jax gpu-run               │    3.8 │ 0.0264 │     1.19 │        - │\n"
    "└──────────────────────────────────┴────────┴────────┴──────────┴──────────┘\n"
    "         continued (rows by search)          \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓\n"
    "┃ search                           ┃ failed ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩\n"
    "│ cpu (16 cores/trial) jax cpu-run │      1 │\n"
    "│ gpu x1 jax gpu-run               │      0 │\n"
    "└──────────────────────────────────┴────────┘\n"
    "          gpu x1 jax gpu-run against cpu (16 cores/trial) jax cpu-run          \n"
    "┏━━━━━━━━━┳━━━┳━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━┓\n"
    "┃         ┃   ┃   ┃ steady s/epoch ┃   epoch speedup ┃  trial speedup ┃  cost ┃\n"
    "┃       # ┃ a ┃ b ┃  (base, other) ┃        [95% CI] ┃       [95% CI] ┃ ratio ┃\n"
    "┡━━━━━━━━━╇━━━╇━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━┩\n"
    "│       1 │ 1 │ x │      1.1, 0.11 │ 10x [5.74-17.4] │ 5x [2.87-8.71] │  1.25 │\n"
    "│       2 │ 1 │ y │         2, 0.2 │     10x [10-10] │       5x [5-5] │  1.25 │\n"
    "│       3 │ 2 │ x │      0.5, 0.05 │     10x [10-10] │ 0.5x [0.5-0.5] │ 0.125 │\n"
    "│ geomean │   │   │                │             10x │          2.32x │       │\n"
    "└─────────┴───┴───┴────────────────┴─────────────────┴────────────────┴───────┘\n"
    "                            continued (rows by #)                            \n"
    "┏━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┓\n"
    "┃         ┃         ┃ trial s, steady ┃ + one-off in trial ┃ = trial wall s ┃\n"
    "┃       # ┃ repeats ┃   (base, other) ┃    s (base, other) ┃  (base, other) ┃\n"
    "┡━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━┩\n"
    "│       1 │    2, 2 │        11, 2.19 │               0, 0 │       11, 2.19 │\n"
    "│       2 │    2, 2 │           20, 4 │               0, 0 │          20, 4 │\n"
    "│       3 │    2, 2 │           5, 10 │               0, 0 │          5, 10 │\n"
    "│ geomean │         │                 │                    │                │\n"
    "└─────────┴─────────┴─────────────────┴────────────────────┴────────────────┘\n"
)

AT_120 = (
    "                                                 mnist: whole searches                                                 \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓\n"
    "┃                                  ┃ makespan ┃ relative ┃            time to ┃        ┃   cost ┃ relative ┃ training ┃\n"
    "┃ search                           ┃        s ┃     time ┃ test_accuracy 0.95 ┃ $/hour ┃      $ ┃     cost ┃    share ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩\n"
    "│ cpu (16 cores/trial) jax cpu-run │      100 │        1 │                 42 │    0.8 │ 0.0222 │        1 │        - │\n"
    "│ gpu x1 jax gpu-run               │       25 │     0.25 │                  9 │    3.8 │ 0.0264 │     1.19 │        - │\n"
    "└──────────────────────────────────┴──────────┴──────────┴────────────────────┴────────┴────────┴──────────┴──────────┘\n"
    "         continued (rows by search)          \n"
    "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓\n"
    "┃ search                           ┃ failed ┃\n"
    "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩\n"
    "│ cpu (16 cores/trial) jax cpu-run │      1 │\n"
    "│ gpu x1 jax gpu-run               │      0 │\n"
    "└──────────────────────────────────┴────────┘\n"
    "                             gpu x1 jax gpu-run against cpu (16 cores/trial) jax cpu-run                              \n"
    "┏━━━━━━━━━┳━━━┳━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓\n"
    "┃         ┃   ┃   ┃ steady s/epoch ┃   epoch speedup ┃ trial s, steady ┃  trial speedup ┃  cost ┃ + one-off in trial ┃\n"
    "┃       # ┃ a ┃ b ┃  (base, other) ┃        [95% CI] ┃   (base, other) ┃       [95% CI] ┃ ratio ┃    s (base, other) ┃\n"
    "┡━━━━━━━━━╇━━━╇━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩\n"
    "│       1 │ 1 │ x │      1.1, 0.11 │ 10x [5.74-17.4] │        11, 2.19 │ 5x [2.87-8.71] │  1.25 │               0, 0 │\n"
    "│       2 │ 1 │ y │         2, 0.2 │     10x [10-10] │           20, 4 │       5x [5-5] │  1.25 │               0, 0 │\n"
    "│       3 │ 2 │ x │      0.5, 0.05 │     10x [10-10] │           5, 10 │ 0.5x [0.5-0.5] │ 0.125 │               0, 0 │\n"
    "│ geomean │   │   │                │             10x │                 │          2.32x │       │                    │\n"
    "└─────────┴───┴───┴────────────────┴─────────────────┴─────────────────┴────────────────┴───────┴────────────────────┘\n"
    "        continued (rows by #)         \n"
    "┏━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━┓\n"
    "┃         ┃         ┃ = trial wall s ┃\n"
    "┃       # ┃ repeats ┃  (base, other) ┃\n"
    "┡━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━┩\n"
    "│       1 │    2, 2 │       11, 2.19 │\n"
    "│       2 │    2, 2 │          20, 4 │\n"
    "│       3 │    2, 2 │          5, 10 │\n"
    "│ geomean │         │                │\n"
    "└─────────┴─────────┴────────────────┘\n"
)


def shown(width: int) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
    for table in compare_report.terminal_tables(compare(cpu_and_gpu(), PRICES), width):
        console.print(table)
    return console.export_text()


@pytest.mark.parametrize("width, expected", [(80, AT_80), (120, AT_120)])
def test_the_comparison_tables_fit_the_terminal_exactly(width, expected):
    assert shown(width) == expected


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
def test_no_line_is_wider_than_the_terminal_and_no_value_is_cut(width):
    text = shown(width)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    assert all(value in text for value in ("10x [5.74-17.4]", "0.5x [0.5-0.5]", "cpu (16 cores/trial) jax cpu-run"))


def test_the_compare_view_link_names_the_runs_and_their_experiments():
    url = compare_runs_url("http://127.0.0.1:5000", ["a1", "b2"], ["3", "3", ""])
    assert url == "http://127.0.0.1:5000/#/compare-runs?runs=%5B%22a1%22%2C%22b2%22%5D&experiments=%5B%223%22%5D"


def test_where_the_baseline_won_is_said_for_any_pair():
    result = compare(cpu_and_gpu(), PRICES)
    assert result.pairings[0].baseline_faster == ("a=2 b=x",)  # the CPU baseline; a GPU baseline alike
    from gridbench.comparison import html

    page = html.comparison_page(result, "sqlite:///x.db")
    assert "Where the baseline won (cpu (16 cores/trial) jax cpu-run)" in page
    assert "faster per trial (at steady cost): a=2 b=x" in page and "cost ratio = the baseline" in page
