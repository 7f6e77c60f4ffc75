"""One pass over a log: every line goes to the parser that owns it."""

from __future__ import annotations

from imagekit.validate.model import Result
from imagekit.validate.mpi_bench import MpiBenchParser
from imagekit.validate.nccl_log import NcclLogParser
from imagekit.validate.nccl_tests import NcclTestsParser
from imagekit.validate.text import clean_lines, normalize, unwrap, wrap_widths


def parse(data: "bytes | str", source: str = "-") -> Result:
    """Parse nccl-tests, OSU / mpi4py benchmark output and NCCL_DEBUG=INFO lines.

    Never raises on bad input: what could not be read is recorded on the result
    (``garbled``, ``truncated``, no tables) and judged by :func:`evaluate`.
    When the tables do not read cleanly, the text is also tried as a copy of a
    terminal that hard-wrapped long lines, and the cleaner reading wins.
    """
    text = normalize(data)
    result = _parse_text(text, source)
    if not _garbled(result):
        return result
    # Only a reading with no garbled rows and at least as many rows may replace the plain one:
    # joining lines must never hide a truncation or invent rows.
    for width in wrap_widths(text):
        alt = _parse_text(unwrap(text, width), source)
        if not _garbled(alt) and _rows(alt) >= _rows(result):
            return alt
    return result


def _garbled(result: Result) -> int:
    return sum(len(r.garbled) for r in result.nccl_tests)


def _rows(result: Result) -> int:
    return sum(len(r.rows) for r in result.nccl_tests) + sum(len(r.points) for r in result.mpi)


def _parse_text(text: str, source: str) -> Result:
    lines = clean_lines(text)
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
