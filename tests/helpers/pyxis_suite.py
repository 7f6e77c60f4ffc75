"""Pyxis 0.24.0's own bats tests, run against the real Pyxis in three modes (issue 34).

- ``native``: Pyxis's own ``enroot import`` of each image from a local registry (what a site runs
  without imagekit);
- ``sqsh``: imagekit's ``.sqsh`` of the same engine image, given as ``--container-image=/path.sqsh``;
- ``importer``: imagekit's Pyxis importer on the plugstack line, pulling from the same registry.

The tests come from the site mirror's ``pyxis-0.24.0.tar.gz`` untouched but for the image names
(:func:`rewrite`), and run with Debian's ``bats``. Their images are offline stand-ins
(:mod:`pyxis_standins`) served by a local registry. Enroot speaks HTTPS to every registry unless
``ENROOT_ALLOW_HTTP`` is set, and Pyxis strips that from the job's environment, so the native mode
needs it in Enroot's configuration: ``enroot_conf.allows_http()`` writes a drop-in for the run.

Reference rewriting: an image a stand-in exists for becomes ``REGISTRY#NAME`` in the registry modes
(``nvcr.io#nvidia/pytorch:…`` drops NGC's host), and the stand-in's ``.sqsh`` in the ``sqsh``
mode, where a test's own ``enroot import -o FILE docker://IMAGE`` becomes a copy of that ``.sqsh``
(the test then starts ``./FILE``). Any other reference is left as it is.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

EXTRA = Path(__file__).resolve().parents[1] / "export" / "imagekit_extra.bats"
MODES = ("native", "sqsh", "importer")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# `--container-image=X`, `--container-image X`, `PYXIS_CONTAINER_IMAGE=X`, `docker://X`.
_REFERENCE = re.compile(r"(?P<lead>--container-image[= ]|PYXIS_CONTAINER_IMAGE=|docker://)(?P<ref>[^\s'\"]+)")
_IMPORT = re.compile(r"run_enroot import -o (?P<out>\S+) docker://(?P<ref>[^\s'\"]+)")
_TAP = re.compile(r"^(?P<ok>ok|not ok) \d+ (?P<name>.*?)(?P<skip> # skip\b.*)?$")


def standin_name(ref: str) -> str:
    """The stand-in's name for a reference as the tests write it (NGC's host dropped)."""
    return ref.removeprefix("nvcr.io#")


def rewrite(text: str, mode: str, registry: str, sqsh: dict[str, Path], names: set[str]) -> str:
    """A bats file's text with each stand-in's reference pointed at this run's copy of it."""
    if mode == "sqsh":
        def imported(m: re.Match) -> str:
            name = standin_name(m["ref"])
            return f"cp {sqsh[name]} {m['out']}" if name in names else m[0]
        text = _IMPORT.sub(imported, text)

    def point(m: re.Match) -> str:
        name = standin_name(m["ref"])
        if name not in names:
            return m[0]
        if mode == "sqsh" and m["lead"] != "docker://":
            return f"{m['lead']}{sqsh[name]}"
        return f"{m['lead']}{registry}#{name}"

    return _REFERENCE.sub(point, text)


def unpack_tests(tarball: Path, dest: Path) -> Path:
    """Pyxis's tests/ directory (the .bats files and common.bash) from its release tarball."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) == 3 and parts[1] == "tests" and member.isfile() \
                    and (parts[2].endswith(".bats") or parts[2] == "common.bash"):
                (dest / parts[2]).write_bytes(tar.extractfile(member).read())
    return dest


def ere(text: str) -> str:
    """``text`` as a literal in a POSIX extended regex (bats matches ``--filter`` with ``=~``)."""
    return re.sub(r"([.^$*+?(){}\[\]|\\])", r"\\\1", text)


def parse_tap(output: str) -> dict[str, str]:
    """``{test name: "pass" | "fail" | "skip"}`` from bats's TAP."""
    results = {}
    for line in output.splitlines():
        m = _TAP.match(line)
        if m:
            results[m["name"]] = "skip" if m["skip"] else ("pass" if m["ok"] == "ok" else "fail")
    return results


@dataclass
class Run:
    results: dict[str, str]
    tap: str
    seconds: float = 0.0

    def failed(self, names) -> list[str]:
        return [n for n in names if self.results.get(n) != "pass"]


def prepare(src: Path, dest: Path, mode: str, registry: str, sqsh: dict[str, Path], names: set[str]) -> Path:
    """``dest`` holds Pyxis's tests and imagekit's extra file, rewritten for ``mode``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in [*sorted(src.iterdir()), EXTRA]:
        text = path.read_text()
        if path.suffix == ".bats":
            text = rewrite(text, mode, registry, sqsh, names)
        (dest / path.name).write_text(text)
    return dest


def bats_argv(tests_dir: Path, selection: dict[str, list[str]]) -> list[str]:
    """One bats run of the selected tests: their files, and a filter naming exactly them."""
    names = [n for tests in selection.values() for n in tests]
    files = [str(tests_dir / f) for f in selection]
    # bats matches the filter against the name as the file writes it (a `$` there is `\$`).
    pattern = "^(" + "|".join(ere(n.replace("$", "\\$")) for n in names) + ")$"
    return ["bats", "--tap", "--filter", pattern, *files]


def run_bats(argv: list[str], cwd: Path, env: dict[str, str], user=None, timeout: int = 1800) -> Run:
    """The bats run as root (``user`` None) or the test user, with only ``env`` (and HOME)."""
    started = time.monotonic()
    if user is None:
        full = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        proc = subprocess.run(full, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
    else:
        proc = user.run(["env", "-i", f"HOME={user.home}", *(f"{k}={v}" for k, v in env.items()), *argv],
                        cwd=cwd, timeout=timeout)
        out = proc.stdout
    return Run(parse_tap(out), out, time.monotonic() - started)
