"""Terminal tables that fit the terminal's width without cutting a value.

A table too wide for the terminal first stacks its headers on two lines, then splits
into several tables, each no wider than the terminal: the first keeps every key
column (a rank and the configuration's axes, a search's label), the ones after keep
only the first key, which links their rows to the first table's. The columns that
matter most go first. rich would otherwise shrink the columns and cut their values
with "…" (what an 80-column terminal showed before: "hidden_… / learnin…").

The search's results table (gridbench.gridsearch.progress) and compare's tables use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from rich.table import Table


@dataclass(frozen=True, eq=False)
class Column:
    header: str  # a "\n" in it says where it stacks; without one, it stacks at its first space
    cells: list[str]
    key: bool = False  # identifies a row: a rank, the configuration, a search's label
    justify: str = "right"
    stacked: bool = False  # the header on two lines: a narrow terminal

    @property
    def shown_header(self) -> str:
        if "\n" in self.header:
            return self.header if self.stacked else self.header.replace("\n", " ")
        head, _, tail = self.header.partition(" ")
        return f"{head}\n{tail}" if self.stacked and tail and not self.key else self.header

    @property
    def width(self) -> int:
        """What the column takes in a boxed rich table: its widest text, padding either side, one border."""
        return max([*(len(line) for line in self.shown_header.splitlines()), *(len(c) for c in self.cells)]) + 3


def balanced(header: str) -> str:
    """The header with a "\n" at the space that makes its two lines shortest ("cost\nratio")."""
    spaces = [i for i, c in enumerate(header) if c == " "]
    if not spaces:
        return header
    best = min(spaces, key=lambda i: max(i, len(header) - i - 1))
    return f"{header[:best]}\n{header[best + 1 :]}"


def table_width(columns: Sequence[Column]) -> int:
    return 1 + sum(c.width for c in columns)  # the left border, then each column's


def split(columns: Sequence[Column], width: int | None, first: Sequence[str] = ()) -> list[list[Column]]:
    """Groups of columns, each no wider than `width` where a column can fit at all, in the columns' order.

    `first` names the headers to place first, in that order; the other columns follow in theirs.
    """
    columns = list(columns)
    if width is None or table_width(columns) <= width:
        return [columns]
    columns = [replace(c, stacked=True) for c in columns]
    keys = [c for c in columns if c.key]
    rank: dict[str, int] = {}
    for header in first:
        rank.setdefault(header, len(rank))
    pending = sorted((c for c in columns if not c.key), key=lambda c: rank.get(c.header, len(rank)))
    groups: list[list[Column]] = []
    while pending:
        lead = keys if not groups else keys[:1]  # the keys once; then the first key links the rows
        chosen, used = [], table_width(lead)
        for column in list(pending):
            if used + column.width <= width or not chosen:  # a table holds one column at least
                chosen.append(column)
                used += column.width
                pending.remove(column)
        groups.append(lead + [c for c in columns if any(c is x for x in chosen)])
    return groups


def fitted(title: str, columns: Sequence[Column], width: int | None, first: Sequence[str] = ()) -> list[Table]:
    """`columns` as one rich table, or several that each fit `width`; the ones after the first say so."""
    tables = []
    for index, group in enumerate(split(columns, width, first)):
        table = Table(title=title if index == 0 else f"continued (rows by {group[0].header})")
        for column in group:
            table.add_column(column.shown_header, justify=column.justify)
        for row in zip(*(column.cells for column in group)):
            table.add_row(*row)
        tables.append(table)
    return tables
