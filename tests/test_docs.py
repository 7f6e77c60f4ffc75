"""The README is a guide and docs/ the reference (issue 40): held to the shape that keeps them so.

The component reference is generated from the code (scripts/gen_docs.py), so it is compared with a
fresh rendering rather than read by eye.
"""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The generator is a script, not a module of the package: read it without touching sys.path.
gen_docs = SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "gen_docs.py")))

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 400
MAX_PARAGRAPH_WORDS = 150
# A list item starts a paragraph of its own, even without a blank line before it.
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a Markdown text: code blocks, tables, headings and comments are not
    prose, and a list item is one paragraph (a blank line inside it starts another)."""
    out: list[str] = []
    current: list[str] = []
    fenced = False

    def flush() -> None:
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            flush()
            fenced = not fenced
            continue
        stripped = line.strip()
        if fenced:
            continue
        if not stripped or stripped.startswith(("|", "#", "<!--")):
            flush()
            continue
        if _ITEM.match(line):
            flush()
        current.append(stripped)
    flush()
    return out


def test_paragraphs_splits_list_items_and_skips_code():
    text = "one two\nthree\n\n- a b\n- c\n  d\n\n```\nnot prose here\n```\n| x | y |\n"
    assert paragraphs(text) == ["one two three", "- a b", "- c d"]


@pytest.mark.parametrize("page", ["components.md", "commands.md", "errors.md"])
def test_generated_reference_is_current(page):
    fresh = {path.name: text for path, text in gen_docs.pages().items()}
    stale = (ROOT / "docs" / page).read_text() != fresh[page]
    assert not stale, f"docs/{page} is stale: run `{gen_docs.COMMAND}` and commit the result"


def test_every_command_and_option_is_in_the_command_reference():
    """Architecture review 4 §6: the hand-kept page named 88 of 176 options. Counted the review's way (each
    option's first flag) and more: every flag, argument and default, of every command in the click tree."""
    import click

    from imagekit.cli import main, tree

    text = (ROOT / "docs" / "commands.md").read_text()
    sections = dict(re.findall(r"^## (imagekit[^\n]*)\n(.*?)(?=^## |\Z)", text, re.S | re.M))
    for path, cmd, ctx in tree.walk(main):
        body = sections.get(" ".join(("imagekit", *path)))
        assert body is not None, f"docs/commands.md has no section for imagekit {' '.join(path)}"
        for param in cmd.get_params(ctx):
            names = param.opts + param.secondary_opts if isinstance(param, click.Option) else [param.human_readable_name]
            for name in names:
                assert f"`{name}`".replace("|", "\\|") in body, f"docs/commands.md: imagekit {' '.join(path)} lacks {name}"
        for line in (cmd.help or "").splitlines():
            if line.strip().startswith("imagekit "):
                assert line.strip() in body, f"docs/commands.md lacks the example {line.strip()!r}"


def test_every_shipped_component_and_option_is_in_the_reference():
    from imagekit import components

    text = gen_docs.OUTPUT.read_text()
    for name, cls in components.registry().items():
        if cls.origin is not None:
            continue
        section = text.split(f"## `{name}`\n", 1)
        assert len(section) == 2, f"docs/components.md has no section for {name}"
        body = section[1].split("\n## ", 1)[0]
        for key in cls.all_options():
            assert f"| `{key}` |" in body, f"docs/components.md: {name} lacks its option {key}"


def test_readme_is_a_guide_of_at_most_400_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move reference material to docs/")


def test_readme_starts_with_the_two_commands():
    """CI and people start from these two lines: set up and run the main job, then the tests."""
    text = README.read_text()
    first = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first, "README.md has no sh block"
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["bash scripts/main-job.sh", "bash scripts/test.sh"]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_no_paragraph_is_over_150_words(page):
    long = [(len(p.split()), p[:80]) for p in paragraphs(page.read_text()) if len(p.split()) > MAX_PARAGRAPH_WORDS]
    assert not long, f"{page.name}: paragraphs over {MAX_PARAGRAPH_WORDS} words (split them): {long}"


def test_no_readme_line_names_a_test_file():
    named = [(n, line) for n, line in enumerate(README.read_text().splitlines(), 1)
             if re.search(r"\btests/\S*\.py|\btest_\w+\.py", line)]
    assert not named, f"README.md names test files (say what is tested, in docs/, instead): {named}"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_relative_links_point_at_files_and_headings(page):
    text = page.read_text()
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files or headings: {broken}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


# --- headline ratios: a paired median from a results file -------------------------------------------

RESULTS = ROOT / "bench" / "results"
# A headline ratio is written in bold: **5.4×** (perf-3 P3-5, perf-4 P4-3: ratios of medians taken at
# different moments are not headlines).
_HEADLINE = re.compile(r"\*\*(\d+(?:\.\d+)?)×\*\*")
_RESULT_LINK = re.compile(r"bench/results/([\w.-]+\.json)")
_HEADING = re.compile(r"^#{1,6} ")


def paired_medians(doc) -> list[float]:
    """Every paired median in a results document: the ``ratio`` and ``times`` spreads that
    bench/record.py's ``paired`` writes (min, median, max and n)."""
    found: list[float] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("ratio", "times") and isinstance(value, dict) and {"n", "min", "median", "max"} <= set(value):
                found.append(float(value["median"]))
            else:
                found += paired_medians(value)
    elif isinstance(doc, list):
        for value in doc:
            found += paired_medians(value)
    return found


def backs(medians: list[float], written: str) -> bool:
    """Whether a median, rounded as the docs wrote it, is the number written."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    return any(f"{m:.{decimals}f}" == written for m in medians)


def headlines(text: str) -> list[tuple[str, str, list[str]]]:
    """(section title, ratio as written, results files the section names) for each headline ratio."""
    sections: list[tuple[str, list[str]]] = [("(top)", [])]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and _HEADING.match(line):
            sections.append((line, []))
        sections[-1][1].append(line)
    out = []
    for title, lines in sections:
        body = "\n".join(lines)
        files = sorted(set(_RESULT_LINK.findall(body)))
        out += [(title, ratio, files) for ratio in _HEADLINE.findall(body)]
    return out


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_headline_ratio_is_a_paired_median_of_a_results_file(page):
    bad = []
    for title, ratio, files in headlines(page.read_text()):
        if not files:
            bad.append(f"{title}: **{ratio}×** names no bench/results/*.json in its section")
            continue
        medians = [m for f in files if (RESULTS / f).is_file()
                   for m in paired_medians(json.loads((RESULTS / f).read_text()))]
        if not backs(medians, ratio):
            bad.append(f"{title}: **{ratio}×** is no paired median (ratio or times) of {', '.join(files)}")
    assert not bad, "\n".join(bad)


def test_the_headline_check_can_fail():
    doc = {"rows": {"x": {"wall": {"ratio": {"n": 3, "min": 0.1, "median": 0.185, "max": 0.3},
                                   "times": {"n": 3, "min": 3.3, "median": 5.41, "max": 10.0}}}}}
    medians = paired_medians(doc)
    assert backs(medians, "5.4") and backs(medians, "5.41") and not backs(medians, "5.38")
    text = "# A\nx **5.4×** (bench/results/a.json)\n## B\ny **2.0×**\n"
    assert headlines(text) == [("# A", "5.4", ["a.json"]), ("## B", "2.0", [])]
