"""Temporary directories go when the fixture that made them goes.

pytest keeps every directory that ``tmp_path_factory.mktemp`` makes until the session ends. The
module-scoped fixtures here hold registries, stores and exports of whole images (hundreds of MB
each), so a full run kept about 20 GB at once and filled this machine's disk. A directory made
while a non-session fixture was being set up is removed when that fixture is torn down;
session fixtures keep theirs, and ``tmp_path`` follows ``tmp_path_retention_policy`` (pyproject).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

_OWN = ("tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory")
_made_by: dict[int, list[Path]] = {}


def _entries(base: Path) -> set[str]:
    try:
        return set(os.listdir(base))
    except OSError:
        return set()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope == "session" or fixturedef.argname in _OWN:
        yield
        return
    base = request.config._tmp_path_factory.getbasetemp()
    before = _entries(base)
    yield
    made = _entries(base) - before
    if made:
        _made_by.setdefault(id(fixturedef), []).extend(base / name for name in sorted(made))


def pytest_fixture_post_finalizer(fixturedef, request):
    for path in _made_by.pop(id(fixturedef), []):
        shutil.rmtree(path, ignore_errors=True)
