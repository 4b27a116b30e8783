"""The pieces of gridbench's self-contained HTML pages: one file each, no scripts, charts as inline SVG."""

from __future__ import annotations

import html
import io
from typing import Sequence

REPORT_PAGE = "report.html"  # the artifact name of a comparison's or a scale's page

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.verdict { font-size: 1.25em; border-left: 4px solid #2a7; padding: 0.4em 0.8em; background: #f3faf6; }
.headline { display: flex; gap: 1em; flex-wrap: wrap; }
.figure { border: 1px solid #ccc; border-radius: 6px; padding: 0.6em 1em; min-width: 11em; }
.figure b { display: block; font-size: 1.6em; }
.chart svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 0.9em; }
"""


def document(title: str, body: Sequence[str]) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )


class Markup(str):
    """Text that is HTML already (a link made by `link`): a table puts it in as it is."""


def link(text: str, href: str) -> Markup:
    return Markup(f'<a href="{html.escape(href)}">{html.escape(text)}</a>')


def _cell(value) -> str:
    return value if isinstance(value, Markup) else html.escape(str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def card(title: str, value: str, note: str = "") -> str:
    return f'<div class="figure">{html.escape(title)}<b>{html.escape(value)}</b>{html.escape(note)}</div>'


def chart(name: str, fig) -> str:
    """A matplotlib figure as inline SVG (the figure is closed). Its text stays text (the browser draws it in
    the font the figure names): readable, searchable, and what the browser test reads."""
    import matplotlib
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    return f'<div class="chart" id="chart-{name}">{svg[svg.index("<svg") :]}</div>'  # inline: no XML prolog


def bullets(lines: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_cell(line)}</li>" for line in lines) + "</ul>"


def heading(text: str, level: int = 2) -> str:
    return f"<h{level}>{html.escape(text)}</h{level}>"


def note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def plain_ticks(axis) -> None:
    """A log axis' tick labels as plain numbers (0.2, 1, 5), never 2x10^-1; minor ticks at 2 and 5 only."""
    from matplotlib.ticker import FuncFormatter

    def major(value, _position) -> str:
        return f"{value:g}"

    def minor(value, _position) -> str:
        mantissa = f"{value:.1e}"[:3]
        return f"{value:g}" if mantissa in ("2.0", "5.0") else ""

    axis.set_major_formatter(FuncFormatter(major))
    axis.set_minor_formatter(FuncFormatter(minor))
