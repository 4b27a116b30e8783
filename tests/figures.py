"""Published figures traced to raw output: what tests/test_results_figures.py checks on docs/results/*.md and README.md.

A *figure* is a number with a unit of time, ratio, share or size (`12.3 s`, `45 ms`, `8 min`, `3.17x`, `95%`,
`24 GiB`) in a page's prose or tables, or a number alone in a table's cell (its unit in the heading); numbers
inside code blocks are quoted output, not figures. Each results
page names its raw files on a line of its own:

    Raw files: `h100-projection/run1/log.txt`, `h100-projection/run2/`

(paths from docs/results/; a folder stands for every file in it; `Raw files: none kept beyond the output quoted
here` where the page's code blocks are all there is). A figure *traces* when a number in those files, or in the
page's own code blocks (output quoted as it was printed), rounds to it at the figure's precision (a percentage also
to a fraction, 0.144 for 14.4%; milliseconds also to seconds, 0.0222 for 22.2 ms). What is not read off the raw
output is declared in one HTML comment, which the reader of the page does not see and the check reads:

    <!-- figures
    given: 0.5 s, 95%            settings and specifications (a sleep, an interval's level, a GPU's memory)
                                 and figures the page quotes from an issue as the issue's: not measured here
    unkept: 41.6 s               measured, but from output that was not committed; the page says so where it
                                 shows them (a record kept elsewhere), and a reader cannot check them here
    untraced: 12.5 s             not yet traced when this check came in (issue 43): a known debt, listed so
                                 that it stays visible (none is listed since 2026-11-26); a figure added
                                 since must trace or be declared above
    19.6x = 0.4830 / 0.0246      computed: every number of the expression traces (at the precision written),
                                 and its value is within one unit of the figure's last digit; an expression
                                 may also compute from a raw file: durations("folder/durations.txt"); it
                                 is checked even where the figure also meets a raw number by chance
    -->

README.md names no raw files: its figures trace to the raw files of the results pages it links to.

A figure traces when *some* raw number rounds to it: a necessary condition, not a proof (with many numbers in
the raw files, a wrong figure can meet one by chance). What it catches is the figure with no raw output at all.
"""

from __future__ import annotations

import ast
import bisect
import operator
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"

UNITS = r"ms|s|min|x|×|%|GiB|GB|MiB|MB"
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A number with its unit; in a range (10.8-23 s, 2.65-3.65x) both ends are figures.
FIGURE = re.compile(rf"(?<![\w.\-/])({_NUMBER})(?:\s?(?:-|–)\s?({_NUMBER}))?\s?({UNITS})(?![\w/])")
RAW_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
RAW_LINE = re.compile(r"^Raw files:(.*)$", re.MULTILINE)
DECLARED = re.compile(r"<!--\s*figures\b(.*?)-->", re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INDENTED = re.compile(r"(?:^(?: {4}|\t).*\n?)+", re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
BINARY = {".png", ".jpg", ".svg", ".db", ".npz", ".pkl", ".gz", ".xz"}


@dataclass(frozen=True)
class Figure:
    text: str  # as the page writes it, "3.17x"
    value: float
    decimals: int
    unit: str


# What a raw number may be multiplied by to give the figure: a fraction for a percentage, seconds for milliseconds.
SCALES = {"%": (1, 100), "ms": (1, 1000), "min": (1, 1 / 60)}


TABLE_NUMBER = re.compile(rf"\*{{0,2}}({_NUMBER})\*{{0,2}}")


def figures_in(text: str) -> list[Figure]:
    """The figures of a page's prose and tables: its code blocks, inline code and declarations left out.

    A table's cell that holds a number alone is a figure too (its unit is in the column's heading).
    """
    for pattern in (DECLARED, FENCE, INDENTED, INLINE_CODE):
        text = pattern.sub(" ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets: paths, not figures
    found = []
    for match in FIGURE.finditer(text):
        unit = match.group(3)
        for number in (match.group(1), match.group(2)):
            if number is not None:
                found.append(_figure(number, unit))
    for line in text.splitlines():
        if line.startswith("|"):
            cells = (TABLE_NUMBER.fullmatch(cell.strip()) for cell in line.strip().strip("|").split("|"))
            found += [_figure(cell.group(1), "") for cell in cells if cell is not None]
    return found


def _figure(number: str, unit: str) -> Figure:
    plain = number.replace(",", "")
    decimals = len(plain.partition(".")[2])
    return Figure(f"{number} {unit}" if unit not in ("x", "%", "×", "") else f"{number}{unit}", float(plain), decimals,
                  unit)  # fmt: skip


def numbers_in(text: str) -> list[float]:
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,208.5 -> 1208.5
    return [float(n) for n in RAW_NUMBER.findall(text)]


def raw_paths(page_text: str, base: Path = RESULTS) -> list[Path]:
    """The files and folders a page's `Raw files:` lines name."""
    return [base / path for line in RAW_LINE.findall(page_text) for path in re.findall(r"`([^`]+)`", line)]


def read_raw(paths: list[Path]) -> list[float]:
    numbers: list[float] = []
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix not in BINARY:
                numbers += numbers_in(file.read_text(encoding="utf-8", errors="replace"))
    return numbers


def rounds_to(number: float, figure: Figure) -> bool:
    half = 0.5 * 10**-figure.decimals + 1e-9
    return any(abs(number * scale - figure.value) <= half for scale in SCALES.get(figure.unit, (1,)))


def traces(figure: Figure, raw: list[float]) -> bool:
    """A number of `raw` (sorted) rounds to the figure."""
    half = 0.5 * 10**-figure.decimals + 1e-9
    for scale in SCALES.get(figure.unit, (1,)):
        low = bisect.bisect_left(raw, (figure.value - half) / scale)
        if low < len(raw) and rounds_to(raw[low], figure):
            return True
    return False


@dataclass(frozen=True)
class Declared:
    given: frozenset[str]  # figures' texts declared as settings, not measurements
    unkept: frozenset[str]  # measured, from output not committed (the page says so)
    untraced: frozenset[str]  # not traced when the check came in: a debt, listed
    computed: dict[str, str]  # figure's text -> its expression


def declarations(page_text: str) -> Declared:
    given: set[str] = set()
    unkept: set[str] = set()
    untraced: set[str] = set()
    computed: dict[str, str] = {}
    for block in DECLARED.findall(page_text):
        for line in block.strip().splitlines():
            line = line.strip()
            if line.startswith("given:"):
                given |= _listed(line[len("given:") :])
            elif line.startswith("unkept:"):
                unkept |= _listed(line[len("unkept:") :])
            elif line.startswith("untraced:"):
                untraced |= _listed(line[len("untraced:") :])
            elif "=" in line:
                figure, expression = line.split("=", 1)
                computed[_normal(figure)] = expression.strip()
    return Declared(frozenset(given), frozenset(unkept), frozenset(untraced), computed)


def _listed(text: str) -> set[str]:
    """Figures listed after `given:` and the like, separated by ", " (1,617.2 s keeps its comma)."""
    return {_normal(item) for item in re.split(r",\s+", text) if item.strip()}


def _normal(figure_text: str) -> str:
    """`3.17 x`, `3.17x` -> `3.17x`; `12.3s` -> `12.3 s`: one spelling to compare declarations with."""
    match = FIGURE.fullmatch(figure_text.strip())
    if match is None:
        return figure_text.strip()
    return _figure(match.group(1), match.group(3)).text


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,  # a geometric mean's root
}


DURATION_LINE = re.compile(r"^(\d+\.\d+)s (?:call|setup|teardown) ", re.MULTILINE)


def durations(path: Path) -> float:
    """The sum of a pytest `--durations=0` listing: the test workers' time."""
    return sum(float(seconds) for seconds in DURATION_LINE.findall(path.read_text(encoding="utf-8")))


FUNCTIONS = {"durations": durations}  # what an expression may call on a raw file, by its path from docs/results/


def evaluate(expression: str, base: Path = RESULTS) -> tuple[float, list[str]]:
    """An arithmetic expression's value and its numbers as written (+ - * / ** and brackets, and FUNCTIONS).

    Each number is a raw figure at the precision written (0.4830 traces to a raw 0.48302); a whole number
    written as a constant (the 100 of a percentage, the 8 of an eighth root) traces like any other.
    `durations("suite-time-2core/ci-8f5a46b-a-durations.txt")` is computed from that raw file.
    """
    numbers: list[str] = []
    written = expression.replace(",", "")

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            numbers.append(ast.get_source_segment(written, node))
            return float(node.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FUNCTIONS
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return FUNCTIONS[node.func.id](base / node.args[0].value)
        raise ValueError(f"not arithmetic: {expression!r}")

    return value(ast.parse(written, mode="eval").body), numbers


def untraced_figures(page_text: str, raw: list[float], quoted_output: bool = True, base: Path = RESULTS) -> list[str]:
    """The page's figures that no raw number, declared setting or checked computation accounts for, with why.

    `quoted_output`: the page's code blocks count as raw output (a results page quoting what a command printed).
    """
    if quoted_output:
        raw = raw + numbers_in("\n".join(FENCE.findall(page_text) + INDENTED.findall(page_text)))
    raw = sorted(raw)
    declared = declarations(page_text)
    problems = []
    for figure in figures_in(page_text):
        expression = declared.computed.get(figure.text)
        if expression is None:
            if figure.text not in declared.given | declared.unkept | declared.untraced and not traces(figure, raw):
                problems.append(f"{figure.text}: in no raw file, and not declared")
            continue
        # A declared computation is checked even where the figure also meets some raw number by chance.
        result, operands = evaluate(expression, base)
        missing = [text for text in operands if not traces(_figure(text, ""), raw)]
        if missing:
            problems.append(f"{figure.text} = {expression}: {', '.join(missing)} in no raw file")
        elif abs(result - figure.value) > 10**-figure.decimals + 1e-9:  # operands rounded as the page gives them
            problems.append(f"{figure.text} = {expression}: the expression gives {result:.6g}")
    return problems


def check_page(page: Path, base: Path = RESULTS) -> list[str]:
    """What is wrong with a results page: raw files it names that are missing, figures that trace to nothing."""
    text = page.read_text(encoding="utf-8")
    if not RAW_LINE.search(text):
        return ["names no raw files (a line `Raw files: `path`, ...`)"]
    paths = raw_paths(text, base)  # none: the output the page quotes is all there is
    missing = [f"raw file {p.relative_to(base)} is missing" for p in paths if not p.exists()]
    return missing or untraced_figures(text, read_raw(paths), base=base)


def check_readme(readme: Path = ROOT / "README.md", base: Path = RESULTS) -> list[str]:
    """README's figures, traced to the raw files of the results pages it links to."""
    text = readme.read_text(encoding="utf-8")
    pages = [ROOT / link for link in re.findall(r"\]\((docs/results/[^)#]+\.md)", text)]
    paths = [path for page in pages if page.exists() for path in raw_paths(page.read_text(encoding="utf-8"), base)]
    return untraced_figures(text, read_raw(paths), quoted_output=False)  # its examples are abridged from those pages
