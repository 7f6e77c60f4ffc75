"""One pass over a log: every line goes to the parser that owns it."""

from __future__ import annotations

from imagekit.validate.model import Result
from imagekit.validate.mpi_bench import MpiBenchParser
from imagekit.validate.nccl_log import NcclLogParser
from imagekit.validate.nccl_tests import NcclTestsParser
from imagekit.validate.text import clean_lines


def parse(data: "bytes | str", source: str = "-") -> Result:
    """Parse nccl-tests, OSU / mpi4py benchmark output and NCCL_DEBUG=INFO lines.

    Never raises on bad input: what could not be read is recorded on the result
    (``garbled``, ``truncated``, no tables) and judged by :func:`evaluate`.
    """
    lines = clean_lines(data)
    nccl_tests, mpi, log = NcclTestsParser(), MpiBenchParser(), NcclLogParser()
    noise = 0
    for line in lines:
        if line.log:
            log.feed(line.log)
        if not line.text.strip():
            continue
        if nccl_tests.mode == "table":
            consumed = nccl_tests.feed(line) or mpi.feed(line)
        else:
            consumed = mpi.feed(line) or nccl_tests.feed(line)
        if not consumed:
            noise += 1
    return Result(
        nccl_tests=nccl_tests.finish(),
        mpi=mpi.finish(),
        transport=log.finish(),
        source=source,
        lines=len(lines),
        noise_lines=noise,
    )
