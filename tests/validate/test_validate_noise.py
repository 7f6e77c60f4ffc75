"""Real-world noise must not change the numbers read from a table (property tests)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.validate import parse
from helpers.validate_gen import Spec, nccl_log, nccl_tests_output

BASE, EXP = nccl_tests_output(Spec(style="classic", hosts=("node-a", "node-b"), check=False, maxb=1 << 26))
LOG_LINES = nccl_log("IB").splitlines()


def _figures(text: str) -> list:
    run = parse(text).nccl_tests[0]
    return [(r.size, r.out_of_place.busbw, r.in_place.busbw, r.out_of_place.time_us, r.out_of_place.wrong)
            for r in run.rows]


CLEAN = _figures(BASE)


def _noisy(text: str, seed: int, srun: bool, crlf: bool, ansi: bool, split_rows: bool, tag: bool) -> str:
    rng = random.Random(seed)
    out = []
    for i, line in enumerate(text.splitlines()):
        is_row = line.strip()[:1].isdigit()
        if is_row and split_rows and rng.random() < 0.5:
            # Another rank's NCCL INFO line lands inside the row (shared stdout), rest follows.
            cut = line.index("  ", 60) if "  " in line[60:] else len(line)
            out.append(line[:cut] + rng.choice(LOG_LINES))
            out.append(line[cut:])
        else:
            out.append(line)
        if rng.random() < 0.3:
            out.append(rng.choice(LOG_LINES))
        if rng.random() < 0.05:
            out.append("Warning: Permanently added 'node-b' (ED25519) to the list of known hosts.")
    if ansi:
        out = [f"\x1b[32m{x}\x1b[0m" if rng.random() < 0.3 else x for x in out]
    if tag:
        out = [f"[1,{rng.randrange(16)}]<stdout>:{x}" for x in out]
    if srun:
        out = [f"{rng.randrange(16):2d}: {x}" for x in out]
    return ("\r\n" if crlf else "\n").join(out) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), srun=st.booleans(), crlf=st.booleans(), ansi=st.booleans(),
       split_rows=st.booleans(), tag=st.booleans())
def test_noise_does_not_change_parsed_values(seed, srun, crlf, ansi, split_rows, tag) -> None:
    noisy = _noisy(BASE, seed, srun, crlf, ansi, split_rows, tag)
    result = parse(noisy)
    assert _figures(noisy) == CLEAN
    run = result.nccl_tests[0]
    assert not run.truncated and not run.garbled and run.footer
    assert set(result.transport.transports) <= {"IB", "P2P"}  # sampled log lines only


def test_row_split_by_log_line_glued_to_root_column() -> None:
    """'... sum      -1node-b:4000:4100 [0] NCCL INFO ...' then the rest of the row."""
    lines = BASE.splitlines()
    i = next(n for n, x in enumerate(lines) if x.strip().startswith("4096 "))
    row = lines[i]
    cut = row.index("-1") + 2
    lines[i: i + 1] = [row[:cut] + LOG_LINES[5], row[cut:]]
    assert _figures("\n".join(lines)) == CLEAN
