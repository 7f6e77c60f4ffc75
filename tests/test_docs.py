"""The README is a guide and docs/ the reference (issue 40): held to the shape that keeps them so.

The component reference is generated from the code (scripts/gen_docs.py), so it is compared with a
fresh rendering rather than read by eye.
"""

from __future__ import annotations

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
