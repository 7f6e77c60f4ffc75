#!/usr/bin/env python3
"""How long `imagekit render` takes to refuse a hostile stack (issue 33, G7).

The red team's baseline (../shared/reviews/security-3.md): a 1 KiB alias bomb and a 50 MB stack each
kept `imagekit render` busy past 60 s (killed). Each case here is timed twice: the library's
``stack.load_all`` (parse and refuse) and the whole `imagekit render` process (Python's start and
imports included), median of ``--rounds``.

    python bench/stack_bounds.py [--rounds 5]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record
from imagekit import stack
from imagekit.util.errors import StackError

BOMB = "".join(f"{n}: &{n} [" + ",".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
               for p, n in zip([None, *"abcdefgh"], "abcdefghi"))


def cases(directory: Path) -> dict[str, Path]:
    out = {}

    def put(name: str, text: str) -> None:
        out[name] = directory / f"{name}.yaml"
        out[name].write_text(text)

    put("alias bomb (9 x 9 aliases, <1 KiB)", "name: bomb\n" + BOMB)
    put("many nodes under the size cap (30,000 items)", "name: many\nx: [" + ",".join(["1"] * 30_000) + "]\n")
    put("deep nesting (5,000 levels)", "name: deep\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    big = directory / "huge.yaml"
    with open(big, "w") as fh:
        fh.write("name: huge\nx: [" + "1," * 10_000_000 + "1]\n")
    out["50 MB stack (10 million items)"] = big
    return out


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    run = record.start("stack_bounds", args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'case':48} {'load_all s':>10} {'render s':>9}  (median of {args.rounds}; baseline: >60 s, killed)")
        for name, path in cases(Path(tmp)).items():
            lib, cli = [], []
            for _ in range(args.rounds):
                with record.timer() as t:
                    try:
                        stack.load_all(path)
                    except StackError:
                        pass
                lib.append(t.wall)
                with record.timer() as t:
                    proc = subprocess.run([sys.executable, "-m", "imagekit", "render", str(path)],
                                          capture_output=True, text=True)
                cli.append(t.wall)
                assert proc.returncode == 2, proc.stderr
            print(f"{name:48} {statistics.median(lib):10.3f} {statistics.median(cli):9.3f}")
            rows.append({"case": name, "load_all_s": round(statistics.median(lib), 4),
                         "render_s": round(statistics.median(cli), 4)})
        start_up = []
        for _ in range(args.rounds):
            with record.timer() as t:
                subprocess.run([sys.executable, "-m", "imagekit", "stacks"], capture_output=True, check=True)
            start_up.append(t.wall)
        print(f"{'(start-up: imagekit stacks, no hostile input)':48} {'':10} {statistics.median(start_up):9.3f}")
    run.finish({"rounds": args.rounds, "cases": rows, "start_up_s": round(statistics.median(start_up), 4),
                "baseline": "> 60 s, killed (../shared/reviews/security-3.md)"})


if __name__ == "__main__":
    main()
