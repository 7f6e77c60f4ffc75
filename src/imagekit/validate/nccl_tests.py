"""Parser for nccl-tests output (all_reduce_perf, all_gather_perf, sendrecv_perf, ...).

Handles the layouts nccl-tests has printed over the years: with and without the
``root`` column, ``#wrong`` counts or the legacy max-delta ``error`` column,
``N/A`` when data checking is off (multi-node ``-c 0``), ``cputime``, the
optional per-iteration/bitwise/timestamp columns. The column layout is read
from the table header; rows are assembled from a token stream so that rows
wrapped over several lines, or split by an NCCL log line, still parse.
"""

from __future__ import annotations

import re
from typing import Optional

from imagekit.validate.model import IterStats, Measurement, NcclTestsRun, RankInfo, Row
from imagekit.validate.text import Line

_VERSION = re.compile(r"^#?\s*nccl-tests version\s+(\S+)")
_STARTING = re.compile(r"^#?\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#?\s*Collective test concluded:\s*(\S+)")
_NTHREAD = re.compile(
    r"^#?\s*nThread\s+(?P<nThread>\d+)\s+nGpus\s+(?P<nGpus>\d+)\s+minBytes\s+(?P<minBytes>\d+)\s+"
    r"maxBytes\s+(?P<maxBytes>\d+)\s+step:\s*(?P<step>\d+)\((?P<stepkind>factor|bytes)\)(?P<rest>.*)$"
)
_KV = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(-?\d+)")
_RANK = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_REDUCING = re.compile(r"Reducing maxBytes to (\d+)")
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
_PERF = re.compile(r"\b([a-z][a-z0-9_]*?)_perf(?:_mpi)?\b")

_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?(?:nan|inf)$", re.IGNORECASE)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{2}:\d{2}:\d{2}$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Words that appear in rows: datatypes and reduction ops across nccl-tests versions.
_ROW_WORDS = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "char", "int", "f8e4m3", "f8e5m2", "fp8_e4m3", "fp8_e5m2", "e4m3", "e5m2", "bf16", "fp16", "fp32",
    "sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none",
}
_COLUMN_WORDS = {"time", "cputime", "algbw", "busbw", "#wrong", "error", "#bitdiff", "#iters",
                 "i_min", "i_max", "i_p99", "i_cv%", "timestamp"}


def collective_name(program: str) -> str:
    """``all_reduce_perf_mpi`` / ``./build/all_reduce_perf`` -> ``all_reduce``."""
    name = program.rsplit("/", 1)[-1]
    name = re.sub(r"_mpi$", "", name)
    return re.sub(r"_perf$", "", name)


def _is_num(tok: str) -> bool:
    return bool(_FLOAT.match(tok))


def _table_like(tokens: list[str]) -> bool:
    """True when every token could belong to an nccl-tests row."""
    if not tokens:
        return False
    for tok in tokens:
        if not (_is_num(tok) or tok in ("N/A", "N/A*") or _DATE.match(tok) or tok.lower() in _ROW_WORDS
                or (tok.endswith("*") and _is_num(tok[:-1]))):
            return False
    return True


class _Layout:
    """Where each field sits in a row, read from the ``# size count type ...`` header."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns
        self.ntokens = len(columns) + (1 if "timestamp" in columns else 0)  # date + time
        self.root = columns.index("root") if "root" in columns else None
        self.redop = columns.index("redop") if "redop" in columns else None
        self.groups: list[tuple[int, Optional[int]]] = []  # (index of time, index of #wrong/error)
        self.iters: list[Optional[int]] = []  # index of i_min (nccl-tests -I), per group
        for i, name in enumerate(columns):
            if name in ("time", "cputime"):
                wrong = i + 3 if i + 3 < len(columns) and columns[i + 3] in ("#wrong", "error") else None
                self.groups.append((i, wrong))
                after = (wrong if wrong is not None else i + 2) + 1
                self.iters.append(after if columns[after:after + 4] == ["i_min", "i_max", "i_p99", "i_cv%"] else None)
        self.legacy_error = "error" in columns

    @property
    def usable(self) -> bool:
        return bool(self.groups) and "size" in self.columns and self.columns.index("size") == 0

    def row(self, toks: list[str]) -> Optional[Row]:
        try:
            size, count = toks[0], toks[1]
            if not (_INT.match(size) and _INT.match(count)) or int(size) < 0:
                return None
            dtype = toks[2]
            if not _WORD.match(dtype) or dtype == "N":
                return None
            redop = toks[self.redop] if self.redop is not None else "none"
            if not _WORD.match(redop):
                return None
            root = None
            if self.root is not None:
                if not _INT.match(toks[self.root]):
                    return None
                root = int(toks[self.root])
            halves = []
            for (t, w), it in zip(self.groups[:2], self.iters[:2]):
                time_us, algbw, busbw = toks[t], toks[t + 1], toks[t + 2]
                if not (_is_num(time_us) and _is_num(algbw) and _is_num(busbw)):
                    return None
                wrong: Optional[float] = None
                flagged = False
                if w is not None:
                    raw = toks[w]
                    if raw.endswith("*"):
                        flagged, raw = True, raw[:-1]
                    if raw == "N/A":
                        wrong = None
                    elif _is_num(raw):
                        wrong = float(raw)
                    else:
                        return None
                stats = None
                if it is not None:
                    vals = toks[it:it + 4]
                    if not all(_is_num(v) for v in vals):
                        return None
                    stats = IterStats(*(float(v) for v in vals))
                halves.append(Measurement(float(time_us), float(algbw), float(busbw), wrong, flagged, stats))
        except IndexError:
            return None
        oop = halves[0] if halves else None
        ip = halves[1] if len(halves) > 1 else None
        return Row(int(size), int(count), dtype, redop, root, oop, ip)


def expected_steps(params: dict) -> Optional[int]:
    """How many sizes nccl-tests walks from minBytes to maxBytes, or None if unknown."""
    try:
        lo, hi, step = int(params["minBytes"]), int(params["maxBytes"]), int(params["step"])
        kind = params["stepkind"]
    except (KeyError, ValueError):
        return None
    if hi < lo:
        return None
    if kind == "factor":
        if lo == 0 or step <= 1:
            return None
        n, size = 0, lo
        while size <= hi:
            n, size = n + 1, size * step
        return n
    if step <= 0:
        return None
    return (hi - lo) // step + 1


class NcclTestsParser:
    """Feed clean lines; collects one NcclTestsRun per nccl-tests invocation."""

    def __init__(self) -> None:
        self.runs: list[NcclTestsRun] = []
        self.run: Optional[NcclTestsRun] = None
        self.mode = "none"  # none | pre | table | post
        self.seen: set[str] = set()
        self.layout: Optional[_Layout] = None
        self.pending: list[str] = []
        self.pending_line = 0
        self.mention: Optional[str] = None  # last "<coll>_perf" seen outside a run
        self.header_continues = False

    # -- run lifecycle ---------------------------------------------------------------------
    def _start(self, kind: str, no: int) -> NcclTestsRun:
        if self.run is not None and (kind in self.seen or self.mode in ("table", "post")):
            self._finish_run()
        if self.run is None:
            self.run = NcclTestsRun(line=no)
            self.runs.append(self.run)
            self.mode = "pre"
            self.seen = set()
            if self.mention:
                self.run.collective = self.mention
                self.mention = None
        self.seen.add(kind)
        return self.run

    def _finish_run(self) -> None:
        run = self.run
        if run is None:
            return
        if self.pending:
            if run.footer:
                run.garbled.append(f"line {self.pending_line}: incomplete row {' '.join(self.pending)!r}")
            else:
                run.truncation.append(f"last row incomplete (line {self.pending_line}: {' '.join(self.pending)!r})")
        if run.columns and not run.footer:
            last = run.rows[-1].size if run.rows else None
            where = f" after size {last}" if last is not None else " before the first row"
            run.truncation.append(f"table stops{where} without '# Avg bus bandwidth'")
        if run.columns and not run.rows and not run.truncation:
            run.garbled.append("table header found but no rows could be read")
        run.expected_steps = expected_steps(run.params)
        if run.expected_steps and run.rows:
            groups: dict[tuple, list[Row]] = {}
            for row in run.rows:
                groups.setdefault((row.dtype, row.redop, row.root), []).append(row)
            for key, rows in groups.items():
                if len(rows) < run.expected_steps:
                    run.truncation.append(
                        f"{len(rows)} of {run.expected_steps} sizes for {key[0]} {key[1]}: sizes stop at "
                        f"{rows[-1].size} bytes, maxBytes is {run.params.get('maxBytes')}"
                    )
        run.truncated = bool(run.truncation)
        self.run, self.mode, self.layout, self.pending, self.seen = None, "none", None, [], set()

    def finish(self) -> list[NcclTestsRun]:
        self._finish_run()
        return self.runs

    # -- lines -------------------------------------------------------------------------------
    def feed(self, line: Line) -> bool:
        """Consume ``line.text`` if it belongs to nccl-tests output; return True if it did."""
        text = line.text.strip()
        if not text:
            return False
        m = _PERF.search(text)
        if m and not text.startswith("#"):
            # A command line echo ("srun ... ./all_reduce_perf -b 8"); names the next run.
            self.mention = collective_name(m.group(0))
            if self.mode not in ("table",):
                return True
        if self.header_continues:
            self.header_continues = False
            words = text.lstrip("#").split()
            if words and all(w in _COLUMN_WORDS for w in words) and self.run is not None:
                self.run.columns.extend(words)
                self.layout = _Layout(self.run.columns)
                return True
        if (m := _VERSION.match(text)):
            self._start("version", line.no).version = m.group(1)
            return True
        if (m := _STARTING.match(text)):
            self._start("starting", line.no).collective = collective_name(m.group(1))
            return True
        if (m := _NTHREAD.match(text)):
            run = self._start("nthread", line.no)
            params: dict = {k: (int(v) if k not in ("stepkind", "rest") else v) for k, v in m.groupdict().items()}
            rest = params.pop("rest")
            for key, val in _KV.findall(rest):
                params[key.strip().replace(" ", "_")] = int(val)
            run.params.update(params)
            return True
        if (m := _CONCLUDED.match(text)):
            if self.run is not None:
                if not self.run.collective:
                    self.run.collective = collective_name(m.group(1))
                self._finish_run()
            return True
        if (m := _RANK.match(text)):
            run = self.run or self._start("ranks", line.no)
            run.ranks.append(RankInfo(int(m.group(1)), int(m.group(2)) if m.group(2) else None, int(m.group(3)),
                                      m.group(4), int(m.group(5)), m.group(6), m.group(7).strip()))
            return True
        if (m := _ERROR.match(text)) and (self.run is not None or self.runs):
            (self.run or self.runs[-1]).errors.append(m.group(1).strip())
            return True
        if (m := _REDUCING.search(text)) and self.run is not None:
            self.run.params["maxBytes"] = int(m.group(1))
            return True
        if self.run is not None and (_OOB.match(text) or _AVG.match(text)):
            return self._comment(text, line)  # legacy nccl-tests prints the footer without '#'
        if text.startswith("#"):
            return self._comment(text, line)
        if self.mode == "table":
            return self._data(text, line)
        return False

    def _comment(self, text: str, line: Line) -> bool:
        words = text.lstrip("#").split() or [""]
        if words[:3] == ["size", "count", "type"]:
            run = self.run if self.run is not None and self.mode == "pre" else self._start("columns", line.no)
            run.columns = words
            self.layout = _Layout(words)
            self.mode = "table"
            self.pending = []
            self.header_continues = True
            return True
        if self.run is None:
            return False
        if (m := _OOB.match(text)):
            self.run.out_of_bounds = int(m.group(1))
            self.mode = "post"
            return True
        if (m := _AVG.match(text)):
            try:
                self.run.avg_busbw = float(m.group(1))
            except ValueError:
                self.run.avg_busbw = None
            self.run.footer = True
            self.mode = "post"
            return True
        # "#", "# Using devices", units line, "out-of-place in-place", "# Blocking Enabled" ...
        return self.mode in ("pre", "table", "post")

    def _data(self, text: str, line: Line) -> bool:
        tokens = text.split()
        if not _table_like(tokens):
            return False  # noise inside the table (a warning, a stray log line): skip it
        run, layout = self.run, self.layout
        assert run is not None and layout is not None
        if not layout.usable:
            run.garbled.append(f"line {line.no}: table header has no time/busbw columns")
            return True
        if not self.pending:
            self.pending_line = line.no
        self.pending.extend(tokens)
        while len(self.pending) >= layout.ntokens:
            row = layout.row(self.pending[: layout.ntokens])
            if row is not None:
                run.rows.append(row)
                self.pending = self.pending[layout.ntokens:]
                self.pending_line = line.no
                continue
            run.garbled.append(f"line {self.pending_line}: cannot read row {' '.join(self.pending[:layout.ntokens])!r}")
            self.pending = self._resync(self.pending)
            self.pending_line = line.no
        return True

    @staticmethod
    def _resync(tokens: list[str]) -> list[str]:
        """Drop tokens up to the next plausible row start: <int> <int> <word>."""
        for i in range(1, len(tokens)):
            nxt = tokens[i:i + 3]
            if _INT.match(nxt[0]) and (len(nxt) < 2 or _INT.match(nxt[1])) and (len(nxt) < 3 or _WORD.match(nxt[2])):
                return tokens[i:]
        return []
