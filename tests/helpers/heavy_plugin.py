"""The heavy tier in pytest: which tests are heavy, and the record a passing heavy run leaves.

A test is heavy when it is marked ``heavy`` or uses a fixture that builds a heavy image (below).
With ``IMAGEKIT_HEAVY_RECORD`` set (``scripts/test.sh --heavy``), every image the session builds is
noted, and a session in which heavy tests ran and nothing failed writes ``.ci/heavy-tier.json``
(scripts/heavy_tier.py) for CI to compare the tree against.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from imagekit import build

import heavy_tier  # noqa: E402

HEAVY_FIXTURES = heavy_tier.HEAVY_FIXTURES
RECORD_ENV = "IMAGEKIT_HEAVY_RECORD"


def is_heavy(item: pytest.Item) -> bool:
    return item.get_closest_marker("heavy") is not None


class HeavyRecorder:
    def __init__(self) -> None:
        self.builds: list[heavy_tier.Build] = []
        self.tests: set[str] = set()
        self.items: list[pytest.Item] = []
        self.expected = 0
        self.passed = 0
        self.failed = 0
        self.started = time.monotonic()
        self.load_at_start = os.getloadavg()[0]
        self.item: pytest.Item | None = None   # the test being set up, run or torn down
        self.fixtures: list[str] = []          # the fixtures being set up, innermost last
        self._build = build.build

    def fed(self) -> list[str]:
        """The heavy test files a build made now feeds: those using the fixture that is building it
        (its image is shared by every test that asks for it), else the test that is running."""
        if self.fixtures:
            name = self.fixtures[-1]
            return [heavy_tier.Tree().rel(Path(str(i.path))) for i in self.items
                    if name in getattr(i, "fixturenames", ())]
        return [heavy_tier.Tree().rel(Path(str(self.item.path)))] if self.item is not None else []

    def recording_build(self, stack, request=None, **kw):
        result = self._build(stack, request, **kw)
        self.builds.append(heavy_tier.Build.of(heavy_tier.Tree(), stack, result.target, result.recipe_sha256,
                                               tests=self.fed()))
        return result

    def report(self, report: pytest.TestReport, heavy: bool) -> None:
        # A skipped heavy test counts as not passed: a record vouches for every heavy test.
        if report.failed or (heavy and report.skipped):
            self.failed += 1
        elif heavy and report.when == "call" and report.passed:
            self.passed += 1


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(RECORD_ENV):
        recorder = HeavyRecorder()
        config.stash[_KEY] = recorder
        build.build = recorder.recording_build


_KEY = pytest.StashKey[HeavyRecorder]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the markers must be on already
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.heavy)
    recorder = config.stash.get(_KEY, None)
    if recorder is not None:
        heavy = [item for item in items if is_heavy(item)]
        recorder.expected = len(heavy)
        recorder.items = heavy
        recorder.tests = {heavy_tier.Tree().rel(Path(str(item.path))) for item in heavy}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    recorder = item.config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.item = item
    yield
    if recorder is not None:
        recorder.item = None


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    recorder = request.config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.fixtures.append(fixturedef.argname)
    try:
        yield
    finally:
        if recorder is not None:
            recorder.fixtures.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    recorder = item.config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.report(outcome.get_result(), is_heavy(item))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.stash.get(_KEY, None)
    if recorder is None:
        return
    build.build = recorder._build
    if exitstatus != 0 or recorder.failed or not recorder.passed or recorder.passed != recorder.expected:
        print(f"\nheavy tier: not recorded ({recorder.passed} of {recorder.expected} heavy tests passed, "
              f"{recorder.failed} failed or skipped, exit status {exitstatus})", file=sys.stderr)
        return
    record = heavy_tier.new_record(sorted(recorder.tests), recorder.builds, time.monotonic() - recorder.started,
                                   recorder.passed, load_at_start=recorder.load_at_start)
    heavy_tier.write_record(record)
    print(f"\nheavy tier: recorded {record.passed} passing tests and {len(record.builds)} recipes in "
          f"{heavy_tier.Tree().rel(heavy_tier.RECORD)} (commit {record.commit})", file=sys.stderr)
