"""Record an export's progress as its line sees it, for the ETA's replay test (tests/test_progress.py).

Each report the export makes (``(bytes so far, finished)``, at most every 0.5 s) is kept with its time
since the export began, and so is the size of the file being written (sampled every 0.5 s): what the
squashfs tool has processed shows there, while the bytes count only what it has read. The recording is
what the ETA is replayed against: at each tenth of the time the export took, the time left the line
would have shown against the time that was left.

    python bench/progress_record.py imagekit/debian-mpi:latest --to sif \\
        --record tests/data/progress/sif-gzip.json
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import record

sys.path.insert(0, str(record.ROOT / "src"))

from imagekit.export import ExportRequest, export_image  # noqa: E402


class Recorder:
    """The progress callback an export reports to, keeping every report with its time."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.expected: int | None = None
        self.events: list[tuple[float, int]] = []

    def begin(self, expected: int | None) -> None:
        self.t0, self.expected = time.monotonic(), expected

    def __call__(self, total: int, done: bool) -> None:
        self.events.append((round(time.monotonic() - self.t0, 3), total))


def _watch(directory: Path, recorder: Recorder, stop: threading.Event, out: list) -> None:
    while not stop.wait(0.5):
        sizes = [p.stat().st_size for p in directory.glob(".*part*") if p.is_file()]
        out.append((round(time.monotonic() - recorder.t0, 3), max(sizes, default=0)))


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("image")
    ap.add_argument("--to", default="sif", choices=["sif", "enroot"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--record", type=Path, required=True, help="where the recording goes (JSON)")
    args = ap.parse_args()
    run = record.start("progress_record", args)
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="imagekit-progress-") as tmp:
        target = Path(tmp) / ("x.sif" if args.to == "sif" else "x.sqsh")
        stop, written = threading.Event(), []
        watcher = threading.Thread(target=_watch, args=(Path(tmp), recorder, stop, written), daemon=True)
        request = ExportRequest(format=args.to, **({"preset": args.preset} if args.preset else {}))
        watcher.start()
        with record.timer() as t:
            result = export_image(args.image, request, target, progress=recorder, store=False)
        stop.set()
        watcher.join()
    doc = {"format": args.to, "preset": result.compression, "tool": result.tool, "expected": recorder.expected,
           "seconds": round(t.wall, 3), "bytes": result.bytes, "events": recorder.events, "written": written}
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    run.finish({"format": args.to, "preset": result.compression, "seconds": round(t.wall, 1),
                "stream_ended_s": recorder.events[-2][0] if len(recorder.events) > 1 else None,
                "record": str(args.record)})


if __name__ == "__main__":
    main()
