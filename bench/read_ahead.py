"""An export with the squashfs tool's read-ahead bounded (squash.READ_AHEAD, what imagekit passes) against
the same export with the tool's default (a quarter of the machine's memory), alternated in pairs: the
bound exists for the progress line's sake (imagekit.util.eta) and must cost no time.

Wall time and the CPU time of the export's child processes (the squashfs tool) for each; on a machine
shared with other work, compare pairs, not single runs.

    python bench/read_ahead.py imagekit/debian-mpi:latest --to sif --pairs 2
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import record

sys.path.insert(0, str(record.ROOT / "src"))

from imagekit.export import ExportRequest, export_image, squash  # noqa: E402


def _unbounded(original):
    def command(name, path, spec, out):
        cmd = original(name, path, spec, out)
        if "-mem" in cmd:
            i = cmd.index("-mem")
            del cmd[i:i + 2]
        return cmd
    return command


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("image")
    ap.add_argument("--to", default="sif", choices=["sif", "enroot"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    run = record.start("read_ahead", args)
    bounded, unbounded = squash.tool_command, _unbounded(squash.tool_command)
    runs: list[dict] = []
    for pair in range(args.pairs):
        order = ("bounded", "unbounded") if pair % 2 == 0 else ("unbounded", "bounded")
        for label in order:
            squash.tool_command = bounded if label == "bounded" else unbounded
            with tempfile.TemporaryDirectory(prefix="imagekit-read-ahead-") as tmp:
                request = ExportRequest(format=args.to, **({"preset": args.preset} if args.preset else {}))
                with record.timer() as t:
                    export_image(args.image, request, Path(tmp) / "out", store=False)
            runs.append({"read_ahead": label, "pair": pair, "wall_s": round(t.wall, 1),
                         "child_cpu_s": round(t.children_cpu, 1)})
    squash.tool_command = bounded
    summary = {label: {"median_wall_s": statistics.median(r["wall_s"] for r in runs if r["read_ahead"] == label),
                       "median_child_cpu_s": statistics.median(r["child_cpu_s"] for r in runs
                                                              if r["read_ahead"] == label)}
               for label in ("bounded", "unbounded")}
    run.finish({"format": args.to, "read_ahead": squash.READ_AHEAD, "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
