"""README.md and docs/usage.md print what they show (issues 10 and 49): every ``bash`` and ``python`` block of
the README, then of docs/usage.md, runs in order in one fresh working folder (and one namespace for the
``python`` blocks), so docs/usage.md goes on from what the README's blocks made: the demo's model, its first
campaign, the names the README's Python example defines. Where a ``text`` block follows a runnable block, the
block's output must match what that block shows.

Conventions in both files:

- a ```` ```text ```` block right after a ``bash`` or ``python`` block (only prose between) is that
  block's stdout; a runnable block without one must just succeed (exit status 0, no exception);
- the comparison masks numbers (``28.3``, ``1,500``, ``lenet5``, ``111ms`` -> ``#``, ``#``, ``lenet#``, ``#s``)
  and runs of spaces, so timings, memory and training's losses, which vary by machine and load, pass while
  wording, order and line count must match;
- the figures a stale README gets wrong are compared: percentages (``28.3 %``), counts ``N of M``,
  ``N findings`` and ``N inputs``, each within 10 % of what is shown (at least 1), so the same commands on another CPU (a
  demo model trained a little differently) pass and figures of another analysis or run fail;
- ``<!-- readme-test: figures vary (reason) -->`` right before a block leaves its figures masked too (a
  parallel campaign, which the machine's timing decides); give the reason;
- a line ``...`` stands for any number of lines (none included), and ``...`` inside a line for any text;
- ``<!-- readme-test: skip (reason) -->`` right before a block leaves it out; give the reason;
- ``<!-- readme-test: needs ray -->`` right before a block runs it only where that extra's module imports
  (it is skipped, naming the extra to install, elsewhere).

A ``bash`` block may run 900 s (``IDCGEN_README_TIMEOUT`` sets another limit, for a loaded machine); one that
runs longer is stopped with what it started and fails, and the blocks after it go on.

When the output of a command changes, print what the blocks print now with ``python tests/test_readme.py``
(or ``python tests/test_readme.py 7`` for the README's block 7; ``python tests/test_readme.py docs/usage.md 7``
for docs/usage.md's, after the README's blocks have run unprinted) and paste it into the ``text`` blocks.
Run only these tests with ``pytest -m readme``, skip them with ``pytest -m "not readme"``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"
#: the documents whose blocks run, in this order, in one working folder: docs/usage.md goes on from the README's
DOCUMENTS = (README, USAGE)
#: seconds a ``bash`` block may run; more on a loaded machine: ``IDCGEN_README_TIMEOUT=3600 pytest -m readme``
BLOCK_TIMEOUT = float(os.environ.get("IDCGEN_README_TIMEOUT", "900"))
RUNNABLE = ("bash", "python")
_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((.+?)\)\s*-->")
_NEEDS = re.compile(r"<!--\s*readme-test:\s*needs\s+([\w-]+)\s*-->")
_VARY = re.compile(r"<!--\s*readme-test:\s*figures vary\s*\((.+?)\)\s*-->")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")
#: a duration with its unit, as Keras prints a step's time (``1s/step`` under load, ``111ms/step`` idle)
_DURATION = re.compile(r"\d+(?:\.\d+)?(?:ms|us|µs|s)\b")
#: the figures compared: a percentage, ``N of M``, ``N findings``, ``N inputs``
_FIGURE = re.compile(r"(\d+(?:[.,]\d+)*) ?%|(\d+(?:,\d+)*) of (\d+(?:,\d+)*)\b|(\d+(?:,\d+)*) (?:findings|inputs)\b")
#: how far a figure may be from what is shown: a share of it, and at least 1
FIGURE_TOLERANCE = 0.10


@dataclass
class Block:
    index: int  # among its document's fenced blocks, from 0
    lang: str
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None = None  # the reason given in a skip comment
    needs: str | None = None  # an extra (and the module it installs) the block needs
    shown: str | None = None  # the text block that follows, if any
    vary: str | None = None  # the reason given in a figures-vary comment: its figures are not compared
    doc: str = "README.md"  # the document, relative to the repository root

    @property
    def key(self) -> tuple[str, int]:
        return self.doc, self.index

    @property
    def where(self) -> str:
        return f"{self.doc} line {self.line}"


def name(path: Path) -> str:
    """A document's name as the messages give it: its path from the repository root."""
    return path.resolve().relative_to(ROOT).as_posix()


def parse(text: str, doc: str = "README.md") -> list[Block]:
    """The fenced blocks of a Markdown text, with skip marks and the ``text`` block each runnable one shows
    (``doc`` names the text in messages)."""
    blocks, lines, i, pending_skip, pending_needs, pending_vary = [], text.splitlines(), 0, None, None, None
    while i < len(lines):
        skip, needs, vary = _SKIP.search(lines[i]), _NEEDS.search(lines[i]), _VARY.search(lines[i])
        if skip:
            pending_skip = skip.group(1)
        if vary:
            pending_vary = vary.group(1)
            skip = vary
        if needs:
            pending_needs = needs.group(1)
            skip = needs
        fence = _FENCE.match(lines[i])
        if not fence:
            if (
                lines[i].strip()
                and not skip
                and (pending_skip or pending_needs or pending_vary)
                and not lines[i].lstrip().startswith("<!--")
            ):
                raise ValueError(f"{doc} line {i + 1}: a readme-test skip comment must come right before a block")
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{doc} line {i + 1}: unclosed code block")
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(
            Block(len(blocks), fence.group(1), i + 1, code, pending_skip, pending_needs, vary=pending_vary, doc=doc)
        )
        pending_skip, pending_needs, pending_vary, i = None, None, None, end + 1
    for before, block in zip(blocks, blocks[1:]):
        if block.lang == "text" and before.lang in RUNNABLE:
            before.shown = block.code
    return blocks


def blocks_of(documents: tuple[Path, ...] = DOCUMENTS) -> list[Block]:
    """The blocks of the documents, in the order they run."""
    return [block for path in documents for block in parse(path.read_text(), name(path))]


def skeleton(line: str) -> str:
    """A line with its numbers masked and its spaces collapsed."""
    return " ".join(_NUMBER.sub("#", _DURATION.sub("#s", line)).split())


def figures(line: str) -> list[float]:
    """The figures of a line that are compared (percentages, ``N of M``, ``N findings``, ``N inputs``)."""
    return [float(g.replace(",", "")) for m in _FIGURE.finditer(line) for g in m.groups() if g is not None]


def figures_match(shown: str, actual: str) -> bool:
    """Whether each compared figure of ``actual`` is within FIGURE_TOLERANCE of the one shown (a line with
    ``...`` in it is left to the wording)."""
    if "..." in shown:
        return True
    want, have = figures(shown), figures(actual)
    return len(want) == len(have) and all(abs(a - b) <= max(1.0, FIGURE_TOLERANCE * abs(a)) for a, b in zip(want, have))


def _line_matches(shown: str, actual: str) -> bool:
    if "..." not in shown:
        return shown == actual
    return re.fullmatch(".*".join(re.escape(part) for part in shown.split("...")), actual) is not None


def matches(shown: str, actual: str, compare_figures: bool = True) -> bool:
    """Does the output ``actual`` fit what the README shows (numbers masked but the figures compared, unless
    ``compare_figures`` is False; ``...`` lines elide any lines)?"""
    shown_lines, actual_lines = shown.rstrip("\n").splitlines(), actual.rstrip("\n").splitlines()
    want, have = [skeleton(line) for line in shown_lines], [skeleton(line) for line in actual_lines]
    memo: dict[tuple[int, int], bool] = {}

    def fit(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(want):
                memo[i, j] = j == len(have)
            elif want[i] == "...":
                memo[i, j] = fit(i + 1, j) or (j < len(have) and fit(i, j + 1))
            else:
                memo[i, j] = (
                    j < len(have)
                    and _line_matches(want[i], have[j])
                    and (not compare_figures or figures_match(shown_lines[i], actual_lines[j]))
                    and fit(i + 1, j + 1)
                )
        return memo[i, j]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(want) + len(have)) + 100))
    return fit(0, 0)


def first_difference(shown: str, actual: str) -> str:
    """Where the two first part, for the failure message (``...`` lines end the comparison)."""
    want, have = shown.rstrip("\n").splitlines(), actual.rstrip("\n").splitlines()
    for k, line in enumerate(want):
        if skeleton(line) == "..." or "..." in line:
            return f"line {k + 1} of the shown output elides; compare the rest by eye"
        got = have[k] if k < len(have) else "(no more output)"
        if skeleton(line) != skeleton(got) or not figures_match(line, got):
            return f"line {k + 1}: the text block shows {line!r}, the command printed {got!r}"
    return f"the command printed {len(have) - len(want)} more lines than shown" if len(have) > len(want) else ""


class Runner:
    """Runs the documents' blocks in order in one working folder, each at most once."""

    def __init__(self, workdir: Path, documents: tuple[Path, ...] = DOCUMENTS):
        self.workdir, self.blocks = workdir, blocks_of(documents)
        self.results: dict[tuple[str, int], tuple[int, str, str]] = {}  # (doc, index) -> (status, stdout, stderr)
        self.namespace: dict = {"__name__": "__readme__"}
        bindir = str(Path(sys.executable).parent)
        self.env = dict(
            os.environ,
            PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONUNBUFFERED="1",
        )

    def result(self, wanted: Block) -> tuple[int, str, str]:
        """What a block printed, after running the blocks before it (in its document and the ones before)."""
        last = next(i for i, block in enumerate(self.blocks) if block.key == wanted.key)
        for block in self.blocks[: last + 1]:
            if block.lang in RUNNABLE and not block.skip and not missing(block.needs) and block.key not in self.results:
                self.results[block.key] = self._run(block)
        return self.results[wanted.key]

    def _run(self, block: Block) -> tuple[int, str, str]:
        if block.lang == "bash":
            with subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=self.workdir,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its own process group, so a block past its time is stopped whole
            ) as process:
                try:
                    out, err = process.communicate(timeout=BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    out, err = process.communicate()
                    # recorded as the block's result, so the blocks after it do not run it again
                    return 124, out, f"{err}\nstopped after {BLOCK_TIMEOUT:g} s (IDCGEN_README_TIMEOUT sets the limit)"
            return process.returncode, out, err
        out, err, status = io.StringIO(), io.StringIO(), 0
        previous = Path.cwd()
        os.chdir(self.workdir)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(block.code, f"{block.doc}:{block.line}", "exec"), self.namespace)
        except Exception as exc:  # reported as the block's failure
            import traceback

            err.write("".join(traceback.format_exception(exc)))
            status = 1
        finally:
            os.chdir(previous)
        return status, out.getvalue(), err.getvalue()


def missing(extra: str | None) -> bool:
    """Whether the module of an extra a block needs is absent here (the extras name their module)."""
    import importlib.util

    return extra is not None and importlib.util.find_spec(extra) is None


_BLOCKS = [b for b in blocks_of() if b.lang in RUNNABLE]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    return Runner(tmp_path_factory.mktemp("readme"))


@pytest.mark.readme
@pytest.mark.slow
@pytest.mark.parametrize(
    "block", _BLOCKS, ids=[f"{Path(b.doc).name}-block{b.index}-{b.lang}-line{b.line}" for b in _BLOCKS]
)
def test_readme_block(runner, block):
    if block.skip:
        pytest.skip(f"{block.where}: {block.skip}")
    if missing(block.needs):
        pytest.skip(f'{block.where} needs the {block.needs} extra: pip install -e ".[test,{block.needs}]"')
    status, out, err = runner.result(block)
    assert status == 0, f"{block.where} failed (exit {status}):\n{block.code}\n{err[-3000:]}"
    if block.shown is not None:
        assert matches(block.shown, out, compare_figures=block.vary is None), (
            f"{block.where}: the output differs from what {block.doc} "
            f"shows; {first_difference(block.shown, out)}\n--- printed:\n{out}"
        )


# --- the documents' shape and links ---------------------------------------------------------------------


def test_the_readme_is_a_newcomers_page():
    """Issue 49: the README is the first page, the manual is docs/usage.md: under 400 lines, and the first
    ``idcgen fuzz`` within its first 120."""
    text = README.read_text()
    assert len(text.splitlines()) < 400
    first = next(b for b in parse(text) if b.lang == "bash" and "idcgen fuzz" in b.code)
    assert first.line <= 120, f"README.md's first idcgen fuzz is at line {first.line}"


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown text's headings (lower case, punctuation dropped, spaces to hyphens;
    a repeated one numbered), code blocks left out."""
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            anchor, k = slug, 0
            while anchor in found:
                k += 1
                anchor = f"{slug}-{k}"
            found.add(anchor)
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.name for p in DOCUMENTS])
def test_the_links_reach_their_files_and_sections(path):
    """A section moved from the README to docs/usage.md (issue 49) leaves no link pointing at where it was."""
    broken = []
    for target in _LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            broken.append(f"{target}: no file {where}")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
            broken.append(f"{target}: no section #{anchor} in {name(where)}")
    assert not broken, f"{name(path)}: " + "; ".join(broken)


def test_anchors_are_githubs():
    assert anchors("# Recipes (the paper's experiments)\n## Hardening\n```bash\n# a comment\n```\n## Hardening\n") == {
        "recipes-the-papers-experiments",
        "hardening",
        "hardening-1",
    }


# --- the comparison itself ----------------------------------------------------------------------------


def test_parse_finds_shown_output_and_skips():
    text = (
        "<!-- readme-test: skip (needs a GPU) -->\n```bash\nrun a\n```\n\nprose\n\n```bash\nrun b\n```\n"
        "Output:\n```text\nb 1\n```\n```python\nx = 1\n```\n"
    )
    a, b, shown, c = parse(text)
    assert (a.skip, a.shown, b.skip, b.shown, c.shown) == ("needs a GPU", None, None, "b 1\n", None)
    assert (shown.lang, c.lang, c.code, b.line) == ("text", "python", "x = 1\n", 8)
    with pytest.raises(ValueError, match="line 2: a readme-test skip comment must come right before a block"):
        parse("<!-- readme-test: skip (why) -->\nprose\n```bash\nx\n```\n")
    (needs,) = parse("<!-- readme-test: needs ray -->\n```bash\nidcgen fuzz --workers 2\n```\n")
    assert needs.needs == "ray" and needs.skip is None
    assert missing("no_such_module_here") and not missing("pytest") and not missing(None)


@pytest.mark.parametrize(
    "shown, actual, expected",
    [
        ("IDC 28.3 % (181 of 640)\n", "IDC 28.9 % (185 of 640)\n", True),  # figures vary a little
        ("IDC 28.3 % (181 of 640)\n", "IDC 9.1 % (5 of 1,280)\n", False),  # other figures
        ("IDC 33.9 % (130 of 384)\n", "IDC 28.4 % (182 of 640)\n", False),  # the README's stale ONNX figures
        ("-> 57.6%; 10 findings\n", "-> 57.6%; 5 findings\n", False),
        ("done (2.5 s, peak memory 936 MiB)\n", "done (7.6 s, peak memory 1,103 MiB)\n", True),  # not compared
        ("16/16 - 2s - 111ms/step\n", "16/16 - 18s - 1s/step\n", True),  # Keras' step time, in s under load
        ("IDC 28.3 % (181 of 640)\n", "IDC 28.3% (181 of 640)\n", False),  # wording differs
        ("a 1\nb 2\n", "a 1\nb 2\nc 3\n", False),  # a line more
        ("a 1\n...\nd 4\n", "a 1\nb 2\nc 3\nd 4\n", True),  # elided lines
        ("a 1\n...\nd 4\n", "a 1\nd 4\n", True),  # ... may stand for none
        ("a 1\n...\nd 4\n", "a 1\nb 2\n", False),
        ("Epoch 1/8\n...\nEpoch 8/8\ndone\n", "Epoch 1/8\nEpoch 2/8\nEpoch 8/8\ndone\n", True),
        ('{"idc": 0.28, ...}\n', '{"idc": 0.31, "covered": 181}\n', True),  # ... inside a line
        ("col  a   b\n", "col a b\n", True),  # spacing
        ("lenet5.keras\n", "lenet1.keras\n", True),
    ],
)
def test_matches(shown, actual, expected):
    assert matches(shown, actual) is expected


def document(argument: str) -> Path:
    """The document a command-line argument names (its path from here or from the repository root)."""
    for path in DOCUMENTS:
        if Path(argument).resolve() == path or (ROOT / argument).resolve() == path:
            return path
    raise SystemExit(f"{argument}: not one of {', '.join(name(p) for p in DOCUMENTS)}")


if __name__ == "__main__":  # print what the blocks print now, to paste into the text blocks
    # python tests/test_readme.py [FILE] [N ...]: FILE README.md (default) or docs/usage.md, N the block numbers
    arguments = sys.argv[1:]
    files = [document(a) for a in arguments if not a.isdigit()]
    if len(files) > 1:
        raise SystemExit("usage: python tests/test_readme.py [FILE] [N ...]: one file at a time")
    chosen = name(files[0] if files else README)
    wanted = {int(a) for a in arguments if a.isdigit()}
    order = [name(p) for p in DOCUMENTS]
    with tempfile.TemporaryDirectory() as folder:
        run = Runner(Path(folder))
        for b in run.blocks:
            if order.index(b.doc) > order.index(chosen) or (b.doc == chosen and wanted and b.index > max(wanted)):
                break
            if b.lang not in RUNNABLE or b.skip:
                continue
            shown = b.doc == chosen and (not wanted or b.index in wanted)
            if missing(b.needs):
                if shown:
                    print(f"===== block {b.index} ({b.where}, {b.lang}) skipped: needs the {b.needs} extra")
                continue
            status, out, err = run.result(b)  # the blocks before run too: they make what it uses
            if shown:
                print(
                    f"===== block {b.index} ({b.where}, {b.lang}, exit {status}) "
                    f"{'matches' if b.shown is None or matches(b.shown, out, b.vary is None) else 'DIFFERS'}"
                )
                print(out, end="" if out.endswith("\n") or not out else "\n")
                if status:
                    print(err[-3000:])
