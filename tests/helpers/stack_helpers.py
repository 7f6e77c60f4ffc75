"""Small helpers for the stack/recipe tests: write a stack file, expect a located error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from imagekit.util.errors import StackError

# A valid Debian header; tests append `components:` etc. below it.
DEBIAN = """\
name: t
base:
  image: imagekit/debian:bookworm
  distro: debian12
"""
# A CUDA base (tag carries the CUDA version) for GPU-side components.
CUDA = """\
name: g
base:
  image: nvidia/cuda:12.4.1-devel-ubuntu22.04
  runtime: nvidia/cuda:12.4.1-runtime-ubuntu22.04
  distro: ubuntu22
"""


def write(directory: Path, text: str, name: str = "stack.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of the first line of ``path`` containing ``needle``."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def expect_error(call, path: Path | str | None, line: int | None, key: str | None, *fragments: str,
                 fix: bool = True) -> StackError:
    """Run ``call``; assert a StackError located at ``path:line: key:`` whose text has ``fragments``."""
    with pytest.raises(StackError) as info:
        call()
    err = info.value
    text = str(err)
    if path is not None:
        assert err.file == str(path), text
    assert err.line == line, text
    assert (err.key or None) == key, text
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    if path is not None:
        assert text.startswith(prefix + (f"{key}: " if key else "")), text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    if fix:
        assert err.hint, f"no fix offered: {text!r}"
        assert "\n  fix: " in text
    assert err.exit_code == 2
    return err


def load_text(directory: Path, text: str):
    from imagekit import stack as stack_mod

    return stack_mod.load(write(directory, text))


def render_text(directory: Path, text: str, fmt: str = "docker", **kw) -> str:
    from imagekit import render

    return render.render(load_text(directory, text), fmt, **kw)


def stage(text: str, name: str) -> str:
    """One stage of a rendered two-stage recipe (``devel`` or ``runtime``)."""
    marker = "\nFROM " if "\nFROM " in text else "\nBootStrap: "
    parts = text.split(marker)
    devel, runtime = parts[1], parts[2] if len(parts) > 2 else ""
    return devel if name == "devel" else runtime


def assert_built_labels(labels: dict[str, str], name: str) -> None:
    """What every engine's build of the shipped stack ``name`` records: stack, target, the recipe's hash,
    each component's version and source, and the checks."""
    import json

    from imagekit import render, stack

    s = stack.load(name)
    assert labels["io.imagekit.stack"] == name
    assert labels["io.imagekit.target"] == "runtime"
    assert labels["io.imagekit.recipe.sha256"] == render.recipe_hash(render.render(s))
    for comp_name, comp in s.components.items():
        assert labels[f"io.imagekit.component.{comp_name}.version"] == comp.version
        assert labels[f"io.imagekit.component.{comp_name}.source"] == comp.source
    assert json.loads(labels["io.imagekit.checks"])
