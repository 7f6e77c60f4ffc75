"""Safe output files: temporary name in the target directory, rename when complete.

A failed or interrupted export must never leave a file that looks finished
(a truncated ``.sqsh`` starts fine under Pyxis and fails on first read of a
missing block), so every writer works on ``.NAME.<random>.part`` beside the
target and renames it only after the data is flushed. Free space is checked
before the first byte is written, because running out at 90 % of a 20 GB
image is the most expensive way to learn it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Protocol

from imagekit.util import atomic, digests
from imagekit.util.errors import NoSpaceError, UsageError
from imagekit.util.sizes import human

# Room for squashfs metadata, the SIF header/descriptor table and filesystem slack.
SPACE_MARGIN = 64 * 1024 * 1024


@dataclass
class ExportResult:
    """What one export produced; ``to_json`` is the CLI's ``--json`` document."""

    path: str
    format: str
    image: str
    bytes: int
    sha256: str
    seconds: float
    tool: str = ""
    compression: str = ""
    store_hit: bool = False       # the file came from the export store with no conversion
    store_entry: str = ""         # the store's file ("" with --no-store)
    output_is: str = ""           # link | copy | same (already that file), or "" with --no-store

    def as_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


class ConvertRequest(Protocol):
    """What a converter reads of the export request (:class:`imagekit.export.ExportRequest`, checked
    when made). A Protocol, so the converters need not import the request's module, which reads
    the format table that names them."""

    format: str
    preset: str
    squash_opts: tuple[str, ...]
    tool: str
    via: str
    force: bool                 # replace an existing output
    check_space: bool


class Convert(Protocol):
    """A format's converter: write ``source`` (an image Source, or what open_source reads) as the
    format at ``target``, atomically, as ``request`` says; ``progress(bytes, finished)`` while it
    streams. Every format's converter has this one signature (formats.Format.convert)."""

    def __call__(self, source, target: Path, request: ConvertRequest, *,
                 progress: Callable[[int, bool], None] | None = None) -> ExportResult: ...


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_free_space(directory: Path, needed: int, what: str) -> None:
    """Refuse to start when ``directory`` cannot hold ``needed`` bytes (+ margin)."""
    have = free_bytes(directory)
    want = needed + SPACE_MARGIN
    if have < want:
        raise NoSpaceError(
            f"not enough free space in {directory} for {what}: need about {human(want)}, "
            f"{human(have)} free",
            "free some space (imagekit store gc --max-size SIZE), write elsewhere (-o DIR/NAME, "
            "--store DIR), or pass --no-space-check if you know the output compresses well")


def prepare_target(output: Path, force: bool) -> Path:
    """Absolute target path; refuses to overwrite unless ``force`` (like Enroot's import)."""
    output = Path(output).expanduser().absolute()
    if output.is_dir():
        raise UsageError(f"{output} is a directory", "give a file name, e.g. -o ./image.sqsh")
    if not output.parent.is_dir():
        raise UsageError(f"directory {output.parent} does not exist", f"mkdir -p {output.parent}")
    atomic.writable_dir(output.parent, str(output))   # before any work: read-only, permission denied
    if output.exists() and not force:
        raise UsageError(f"{output} already exists", "remove it or pass --force to replace it")
    return output


def atomic_output(target: Path):
    """A temporary path beside ``target``, synced and renamed onto it only if the block succeeds.

    Any exception, including KeyboardInterrupt and the SIGTERM turned into one by
    :func:`imagekit.util.signals.interrupt_on_sigterm`, removes the temporary file.
    """
    return atomic.target(target, sync=True)


def sha256_file(path: Path) -> str:
    return digests.sha256_file(path)


class Digest:
    """The sha256 of a file just written, read in a thread from the moment it is made: the file is
    opened here, so the rename that publishes it does not matter, and the read (0.3 s per 450 MB
    from the page cache) runs beside the fsync and the clean-up that finish an export rather than
    after them. Nothing of the file may change once this starts."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._answer: list[str] = []
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=f"sha256 {path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._answer.append(digests.sha256_of_fd(self._fd)[0])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
            self._failure.append(exc)
        finally:
            os.close(self._fd)

    def result(self) -> str:
        self._thread.join()
        if self._failure:
            raise self._failure[0]
        return self._answer[0]


def expected_bytes(source, info: dict) -> int | None:
    """The bytes an export of ``source`` will stream, where known before it starts: the engine's image
    size (its layers unpacked). A registry, layout or archive knows only its compressed layers, a
    third of the stream or less, so it gets no total rather than a wrong one."""
    return (int(info.get("Size") or 0) or None) if source.engine_image is not None else None


class Progress:
    """Counts exported bytes and reports them to a callback at most every ``interval`` s. A callback
    with a ``begin`` method (the CLI's progress line) is first told the bytes ``expected``."""

    def __init__(self, report: Callable[[int, bool], None] | None, interval: float = 0.5,
                 expected: int | None = None) -> None:
        self.report = report
        self.interval = interval
        self.total = 0
        self._last = 0.0
        begin = getattr(report, "begin", None)
        if begin is not None:
            begin(expected)

    def add(self, n: int) -> None:
        self.total += n
        if self.report is None:
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self.report(self.total, False)

    def ended(self) -> None:
        """The stream is over and the tool is finishing: a callback with an ``ended`` method hears it."""
        ended = getattr(self.report, "ended", None)
        if ended is not None:
            ended()

    def done(self) -> None:
        if self.report is not None:
            self.report(self.total, True)
