"""The docs' code blocks run as written: every shell, Python and TOML block in docs/ and README.md.

A block is fenced (```python, ```sh, ```toml) or indented by four spaces (shell). An HTML comment
on the line before it, invisible on the page, says how it is checked:

    <!-- docs-test: output -->  a sample of output, a synopsis or a formula: not a command, not run
    <!-- docs-test: setup -->   installs, builds the docs or starts services (.ci/run does that): not run
    <!-- docs-test: gpu -->     needs a GPU, or the GPU machine's datasets and cores: `pytest -m gpu`
    <!-- docs-test: long -->    a CPU search of tens of seconds or more: GRIDBENCH_DOCS_LONG=1 pytest ...

A block on a results page (docs/results/) is a record: the command a measurement came from, on
the machine the page names (running it again is another measurement), or its output; not run.

An unmarked block runs here, in CI, and must take seconds: a Python block as it is (in this
process's interpreter, in a scratch directory), a shell block with bash -e in a scratch
directory (examples/ beside it), a TOML block is parsed. A block of another kind, or an
unknown mark, fails the collection: every block is checked or says why not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
MARKS = ("output", "setup", "gpu", "long", "record")
RESULTS = ROOT / "docs" / "results"
MARK = re.compile(r"<!--\s*docs-test:\s*([a-z]+)\s*-->")
FENCE = re.compile(r"^```\s*([A-Za-z]*)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based, the block's first line
    language: str  # python, sh or toml
    text: str
    mark: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The page's code blocks, fenced and indented (not inside a list item's text or an mkdocstrings option)."""
    lines = page.read_text().splitlines()
    found, i, mark, previous_blank = [], 0, None, True
    record = RESULTS in page.parents
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if MARK.search(line):
            mark = MARK.search(line).group(1)
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            language = {"bash": "sh", "shell": "sh", "console": "sh", "": "text"}.get(fence.group(1), fence.group(1))
            found.append(
                Block(page, i + 2, language, "\n".join(lines[i + 1 : end]), mark or ("record" if record else None))
            )
            i, mark = end, None
        elif line.startswith("    ") and previous_blank and not lines[i - 1].lstrip().startswith(":::"):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            text = "\n".join(entry[4:] for entry in lines[i:end]).strip("\n")
            if not text.lstrip().startswith("options:"):  # mkdocstrings' options under a ::: directive
                found.append(Block(page, i + 1, "sh", text, mark or ("record" if record else None)))
            i, mark = end - 1, None
        elif line.strip():
            mark = None if not line.startswith("<!--") else mark
        previous_blank = not line.strip()
        i += 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def _param(block: Block):
    marks = {"gpu": [pytest.mark.gpu, pytest.mark.slow], "long": [pytest.mark.slow]}.get(block.mark, [])
    return pytest.param(block, id=block.name, marks=marks)


def test_every_block_is_a_known_kind_or_says_why_it_is_not_run():
    runnable = ("python", "sh", "toml")
    unknown = [f"{b.name} ({b.language}, mark {b.mark})" for b in BLOCKS
               if b.mark not in (None, *MARKS) or (b.mark is None and b.language not in runnable)]  # fmt: skip
    assert unknown == [], "mark these blocks (<!-- docs-test: output|setup|gpu|long -->) or make them run"
    assert any(b.language == "python" and b.mark is None for b in BLOCKS)  # the collector finds what CI runs


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.mark in (None, "gpu", "long")])
def test_the_block_runs_as_written(block: Block, tmp_path):
    if block.mark == "gpu":
        from gridbench.environment import visible_gpu_count

        if visible_gpu_count() == 0:
            pytest.skip("needs a GPU (pytest -m gpu on a GPU machine)")
    if block.mark == "long" and not os.environ.get("GRIDBENCH_DOCS_LONG"):
        pytest.skip("a long CPU search: GRIDBENCH_DOCS_LONG=1 runs it")
    if block.language == "toml":
        tomllib.loads(block.text)
        return
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "KERAS_BACKEND")}
    # `python` and `gridbench` are this interpreter's; `python -m gridbench` imports this checkout.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if block.language == "python":
        command = [sys.executable, "-c", block.text]
    else:
        command = [shutil.which("bash") or "bash", "-e", "-o", "pipefail", "-c", block.text]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"{block.name}:\n{block.text}\n--- stdout\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
