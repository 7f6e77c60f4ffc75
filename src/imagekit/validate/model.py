"""What a parsed benchmark log contains: plain dataclasses, JSON-ready via ``asdict``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


@dataclass
class Measurement:
    """One half of an nccl-tests row (out-of-place or in-place)."""

    time_us: float
    algbw: float  # GB/s (1e9 bytes/s), as nccl-tests prints it
    busbw: float  # GB/s
    wrong: Optional[float]  # #wrong elements; None when printed as N/A (no data check)
    flagged: bool = False  # legacy "error" column printed with a trailing '*'
    iters: Optional["IterStats"] = None  # -I per-iteration timing, when the run had it


@dataclass
class IterStats:
    """nccl-tests -I per-iteration timing of one half of a row (times in us).

    The text table carries min/max/p99/cv; the -J JSON also the average and every
    iteration's time, overall (max over processes) and per process."""

    min_us: float
    max_us: float
    p99_us: float
    cv_pct: float
    avg_us: Optional[float] = None
    skipped: int = 0  # leading iterations the summary skips (-K)
    times_us: list[float] = field(default_factory=list)
    per_process_us: list[list[float]] = field(default_factory=list)  # one list per MPI process


@dataclass
class Row:
    size: int  # bytes
    count: int  # elements
    dtype: str
    redop: str
    root: Optional[int]
    out_of_place: Optional[Measurement]
    in_place: Optional[Measurement]

    def busbw(self) -> float:
        """Best bus bandwidth of the two halves (they time the same collective)."""
        return max(m.busbw for m in self.halves())

    def halves(self) -> list[Measurement]:
        return [m for m in (self.out_of_place, self.in_place) if m is not None]

    def named_halves(self) -> list[tuple[str, Measurement]]:
        out = []
        if self.out_of_place is not None:
            out.append(("out-of-place", self.out_of_place))
        if self.in_place is not None:
            out.append(("in-place", self.in_place))
        return out


@dataclass
class RankInfo:
    rank: int
    group: Optional[int]
    pid: int
    host: str
    device: int
    bus_id: str
    gpu: str


@dataclass
class NcclTestsRun:
    """One nccl-tests invocation: header, device list, table and footer."""

    collective: Optional[str] = None  # e.g. "all_reduce" (from "# Collective test starting" or a *_perf mention)
    version: Optional[str] = None  # nccl-tests version when printed
    params: dict[str, Any] = field(default_factory=dict)  # nThread, nGpus, minBytes, maxBytes, step...
    ranks: list[RankInfo] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    out_of_bounds: Optional[int] = None
    avg_busbw: Optional[float] = None
    footer: bool = False  # "# Avg bus bandwidth" seen
    truncated: bool = False
    truncation: list[str] = field(default_factory=list)  # why it is considered truncated
    garbled: list[str] = field(default_factory=list)  # table text that could not be read
    expected_steps: Optional[int] = None
    line: int = 0  # 1-based line of the run's first header line
    source: str = ""  # the file it was read from
    format: str = "text"  # text | json (-J)
    json_version: Optional[int] = None
    errors: list[str] = field(default_factory=list)  # nccl-tests' "# error:" / JSON "errors"

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks})

    @property
    def gpus(self) -> list[str]:
        return sorted({r.gpu for r in self.ranks})


@dataclass
class MpiPoint:
    size: int
    latency_us: Optional[float] = None
    bandwidth_mbps: Optional[float] = None  # MB/s (1e6 bytes/s) as OSU and mpi4py print it


@dataclass
class MpiBenchRun:
    """An MPI benchmark table: OSU micro-benchmarks or ``python -m mpi4py.bench``."""

    benchmark: str  # osu_latency, osu_bw, osu_allreduce, ..., pingpong, ringtest
    title: str = ""
    columns: list[str] = field(default_factory=list)
    points: list[MpiPoint] = field(default_factory=list)
    processes: Optional[int] = None
    truncated: bool = False
    truncation: list[str] = field(default_factory=list)
    line: int = 0


@dataclass
class Channel:
    src: int
    dst: int
    via: str  # text after "via", e.g. "NET/IB/0/GDRDMA", "P2P/IPC/read", "SHM/direct/direct"
    host: Optional[str] = None


@dataclass
class TransportInfo:
    """What NCCL_DEBUG=INFO lines say about the transports in use."""

    transports: list[str] = field(default_factory=list)  # canonical: IB GDRDMA Socket P2P SHM NVLS CollNet NET:<plugin>
    counts: dict[str, int] = field(default_factory=dict)  # channel lines per canonical transport
    vias: dict[str, int] = field(default_factory=dict)  # channel lines per exact "via" text
    networks: list[str] = field(default_factory=list)  # "Using network X"
    ib_devices: list[str] = field(default_factory=list)  # "NET/IB : Using [0]mlx5_0:1/IB"
    socket_devices: list[str] = field(default_factory=list)
    gdr_enabled: Optional[bool] = None  # "GPU Direct RDMA Enabled/Disabled"
    nccl_version: Optional[str] = None
    nranks: Optional[int] = None
    hosts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # NCCL WARN lines (first few)
    info_lines: int = 0
    env_algorithm: Optional[str] = None  # "NCCL_ALGO set by environment to X"
    algorithms: dict[str, int] = field(default_factory=dict)  # "all_reduce:Ring" -> tuning lines (large sizes)


@dataclass
class Result:
    nccl_tests: list[NcclTestsRun] = field(default_factory=list)
    mpi: list[MpiBenchRun] = field(default_factory=list)
    transport: TransportInfo = field(default_factory=TransportInfo)
    source: str = "-"
    lines: int = 0
    noise_lines: int = 0  # lines that were neither table, header nor NCCL log

    @property
    def has_tables(self) -> bool:
        return bool(self.nccl_tests or self.mpi)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for run, out in zip(self.nccl_tests, data["nccl_tests"]):
            out["hosts"] = run.hosts
            out["gpus"] = run.gpus
        return data


@dataclass
class Failure:
    # sanity ("ran wrong"): errors | out_of_bounds | truncated | transport | image | baseline | data | system
    # performance ("ran right but slow"): busbw | latency | band | spread | straggler
    # input (unreadable): input
    check: str
    message: str
    run: Optional[str] = None
    size: Optional[int] = None
    figure: Optional[str] = None  # out-of-place / in-place / peak / ...
    value: Optional[float] = None
    limit: Optional[float] = None

    @property
    def kind(self) -> str:
        if self.check == "input":
            return "input"
        return "performance" if self.check in PERFORMANCE_CHECKS else "sanity"


PERFORMANCE_CHECKS = {"busbw", "latency", "band", "spread", "straggler"}
EXIT_PASS, EXIT_SLOW, EXIT_UNREADABLE, EXIT_WRONG = 0, 1, 2, 9


@dataclass
class Verdict:
    status: str  # pass | fail | unreadable
    failures: list[Failure] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)  # human lines for checks that held
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    expectations: list[dict] = field(default_factory=list)  # --system: what each run should reach, and why
    # The gates that judged something (busbw, latency, transport, image, runs). None applied and no
    # failure: the run parsed and its sanity checks held, which is not a PASS of any limit.
    gates_applied: list[str] = field(default_factory=list)

    @property
    def gated(self) -> bool:
        return bool(self.gates_applied)

    @property
    def outcome(self) -> str:
        """pass | wrong (a sanity check failed: ran wrong) | slow (ran right, below a reference) | unreadable."""
        if self.status != "fail":
            return self.status
        return "wrong" if any(f.kind == "sanity" for f in self.failures) else "slow"

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_PASS, "slow": EXIT_SLOW, "wrong": EXIT_WRONG}.get(self.outcome, EXIT_UNREADABLE)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome
        data["exit_code"] = self.exit_code
        for f, out in zip(self.failures, data["failures"]):
            out["kind"] = f.kind
        return data
