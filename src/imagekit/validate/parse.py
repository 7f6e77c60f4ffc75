"""One pass over a log: every line goes to the parser that owns it."""

from __future__ import annotations

from imagekit.validate.model import NcclTestsRun, Result, TransportInfo
from imagekit.validate.mpi_bench import MpiBenchParser
from imagekit.validate.nccl_json import looks_like_json, parse_json
from imagekit.validate.nccl_log import TRANSPORTS, NcclLogParser
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

    if looks_like_json(text):
        # nccl-tests -J: one run per file; bad or unknown JSON is a usage error (file, line, key).
        return Result(nccl_tests=[parse_json(text, source)], source=source, lines=text.count("\n") + 1)
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


def merge(results: "list[Result]") -> Result:
    """Several files (several runs, or one run's stdout beside its -J JSON) judged as one result.

    A JSON run and a text run with the same ranks (host and pid of every rank) are the same
    nccl-tests invocation: the JSON, with its exact figures and per-iteration data, stands for both.
    """
    if len(results) == 1:
        return results[0]
    out = Result(source=", ".join(r.source for r in results))
    for r in results:
        out.nccl_tests += r.nccl_tests
        out.mpi += r.mpi
        out.lines += r.lines
        out.noise_lines += r.noise_lines
    json_keys = {_invocation(run) for run in out.nccl_tests if run.format == "json" and run.ranks}
    out.nccl_tests = [run for run in out.nccl_tests
                      if run.format == "json" or not run.ranks or _invocation(run) not in json_keys]
    out.transport = _merge_transport([r.transport for r in results])
    return out


def _invocation(run: NcclTestsRun) -> tuple:
    return tuple(sorted((r.rank, r.host, r.pid) for r in run.ranks))


def _merge_transport(infos: "list[TransportInfo]") -> TransportInfo:
    out = TransportInfo()
    for info in infos:
        for name in ("networks", "ib_devices", "socket_devices", "hosts", "warnings"):
            have = getattr(out, name)
            have += [x for x in getattr(info, name) if x not in have]
        for name in ("counts", "vias", "algorithms"):
            have = getattr(out, name)
            for k, n in getattr(info, name).items():
                have[k] = have.get(k, 0) + n
        out.info_lines += info.info_lines
        out.nccl_version = out.nccl_version or info.nccl_version
        out.env_algorithm = out.env_algorithm or info.env_algorithm
        out.nranks = max(filter(None, (out.nranks, info.nranks)), default=None)
        if info.gdr_enabled is not None:
            out.gdr_enabled = bool(out.gdr_enabled) or info.gdr_enabled

    out.transports = [t for t in TRANSPORTS if t in out.counts] + sorted(t for t in out.counts if t not in TRANSPORTS)
    out.hosts.sort()
    return out


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
    runs = nccl_tests.finish()
    for run in runs:
        run.source = source
    return Result(
        nccl_tests=runs,
        mpi=mpi.finish(),
        transport=log.finish(),
        source=source,
        lines=len(lines),
        noise_lines=noise,
    )
