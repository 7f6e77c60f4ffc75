"""The bus bandwidth a run should reach on a system, derived from how the system is built.

busbw (nccl-tests doc/PERFORMANCE.md) is algbw times a per-collective factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast,
reduce, sendrecv 1), chosen so that it is the bandwidth each rank pushes through
its slowest link. So the expected busbw is the bandwidth of the bottleneck:

* inside a node, per GPU: NVLinks x the per-link bandwidth NCCL reaches
  (NCCL's src/graph/topo.h), or the PCIe x16 bandwidth;
* with NVLink SHARP (NVLS), the all_reduce figure the catalogue cites;
* across nodes, per node: NICs x line rate / 8 x efficiency. A ring enters and
  leaves every node once per channel, so 2(n-1)/n x S bytes leave each node in
  an all_reduce of S bytes: exactly the factor busbw divides out, so ring busbw
  is bounded by the per-node network bandwidth, not the per-GPU share;
* NCCL's tuning model (src/graph/tuning.cc) doubles the inter-node figure of
  NVLSTree on 2 nodes and scales Tree all_reduce by 0.92.

The expectation is the lowest bound of the algorithm NCCL used (from the log),
or, when the log does not say, the lowest over the algorithms NCCL could pick.
It holds for the bandwidth range (sizes >= the system's ``bandwidth_from``);
smaller sizes are latency-bound and only reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from imagekit.validate.system import System
from imagekit.sizes import format_size

# nccl-tests' busbw factors (src/*.cu GetBw), for the worked example and the generators.
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
TREE_ALLREDUCE_FACTOR = 0.92  # NCCL tuning.cc: Tree all_reduce busBw *= .92
LATENCY_BOUND_BELOW = 1 << 20


class NotModeled(Exception):
    """The model cannot give an expectation for this run (said why)."""


@dataclass
class RunShape:
    nodes: int
    ranks_per_node: int
    collective: str
    algorithm: Optional[str] = None  # Ring, Tree, NVLS, NVLSTree, ... as NCCL names them
    algorithm_from: str = ""  # where the algorithm was read


@dataclass
class Bound:
    name: str  # NVLink | PCIe | NVLS | network
    gbs: float
    why: str


@dataclass
class Candidate:
    algorithm: str
    bounds: list[Bound]
    scale: float = 1.0
    scale_why: str = ""

    @property
    def limiting(self) -> Bound:
        return min(self.bounds, key=lambda b: b.gbs)

    @property
    def gbs(self) -> float:
        return self.limiting.gbs * self.scale


@dataclass
class Expectation:
    system: System
    shape: RunShape
    expected: float  # GB/s busbw over the bandwidth range
    low: float
    high: float
    algorithm: str
    bound: Bound
    candidates: list[Candidate]
    bandwidth_from: int
    assumptions: list[str] = field(default_factory=list)

    @property
    def ranges(self) -> list[str]:
        """The size ranges and what is expected in each, for the report."""
        return [
            f"< {format_size(LATENCY_BOUND_BELOW)}: latency-bound, no bandwidth expectation (see --max-latency-us)",
            f"{format_size(LATENCY_BOUND_BELOW)} .. < {format_size(self.bandwidth_from)}: rising toward "
            f"{_g(self.expected)} GB/s, reported as a share of it, not gated",
            f">= {format_size(self.bandwidth_from)}: {_g(self.expected)} GB/s, band {_g(self.low)} .. {_g(self.high)} "
            f"GB/s (±{self.system.tolerance:.0%}); gated on the best busbw in this range",
        ]

    def to_dict(self) -> dict:
        return {
            "system": self.system.name, "file": self.system.file, "collective": self.shape.collective,
            "nodes": self.shape.nodes, "ranks_per_node": self.shape.ranks_per_node, "algorithm": self.algorithm,
            "expected_busbw": round(self.expected, 3), "band": [round(self.low, 3), round(self.high, 3)],
            "tolerance": self.system.tolerance, "bound": self.bound.name, "bound_why": self.bound.why,
            "bandwidth_from": self.bandwidth_from, "ranges": self.ranges, "assumptions": self.assumptions,
            "candidates": [{"algorithm": c.algorithm, "busbw": round(c.gbs, 3), "bound": c.limiting.name}
                           for c in self.candidates],
        }


def _g(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _intra(s: System) -> Bound:
    if s.fabric == "pcie":
        return Bound("PCIe", s.intra_gbs, f"PCIe gen {s.pcie_generation} x16: {_g(s.intra_gbs)} GB/s per GPU "
                     "(NCCL's topology figure)")
    gen = f"NVLink {s.nvlink_generation} " if s.nvlink_generation else "NVLink "
    return Bound("NVLink", s.intra_gbs, f"{s.nvlink_links} {gen}links x {_g(s.nvlink_link_busbw or 0)} GB/s per link "
                 f"= {_g(s.intra_gbs)} GB/s per GPU" + {"nvswitch": " through the NVSwitch",
                                                        "cube-mesh": " (NCCL's rings over the hybrid cube-mesh "
                                                                     "use every link)"}.get(s.fabric, ""))


def _network(s: System, times: float = 1.0, per_gpu: Optional[int] = None) -> Bound:
    base = (f"{s.nics_per_node} x {s.nic_kind} {_g(s.rate_gbps or 0)} Gb/s / 8 x {s.efficiency:g} = "
            f"{s.nics_per_node} x {_g(s.nic_gbs)} = {_g(s.network_gbs)} GB/s per node")
    if times != 1.0:
        return Bound("network", s.network_gbs * times, base + f", x{times:g} for NVLSTree on 2 nodes "
                     "(NCCL tuning model)")
    return Bound("network", s.network_gbs, base)


def _nvls(s: System) -> Bound:
    return Bound("NVLS", s.nvls_busbw or 0.0, f"NVLink SHARP all_reduce: {_g(s.nvls_busbw or 0)} GB/s on "
                 f"{s.gpus_per_node} GPUs (the catalogue's cited figure)")


def candidates(s: System, shape: RunShape) -> list[Candidate]:
    coll, nodes, ppn = shape.collective, shape.nodes, shape.ranks_per_node
    if coll not in BUSBW_FACTOR:
        raise NotModeled(f"collective {coll!r} is not modeled (modeled: {', '.join(BUSBW_FACTOR)})")
    if nodes > 1 and s.nics_per_node == 0:
        raise NotModeled(f"the run spans {nodes} nodes but system {s.name} has no network (nics_per_node: 0)")
    intra = _intra(s)
    if nodes == 1 or s.within_nvlink_domain(nodes):
        # One node, or nodes inside one multi-node NVLink domain (NVL72): every GPU reaches every other
        # through the NVLink switches, so the NICs bound nothing.
        if coll == "all_reduce" and s.nvls:
            return [Candidate("Ring", [intra]), Candidate("NVLS", [_nvls(s)])]
        return [Candidate("Ring", [intra])]
    net = _network(s)
    if coll == "all_reduce":
        out = [Candidate("Ring", [intra, net]),
               Candidate("Tree", [intra, net], TREE_ALLREDUCE_FACTOR, "x0.92 for Tree all_reduce (NCCL tuning model)")]
        if s.nvls:
            out.append(Candidate("NVLSTree", [_nvls(s), _network(s, 2.0 if nodes == 2 else 1.0)]))
        return out
    if coll == "alltoall":
        n = nodes * ppn
        share = s.network_gbs / ppn * (n - 1) / (n - ppn)
        return [Candidate("alltoall", [intra, Bound(
            "network", share, f"each GPU's share of the node's network: {_g(s.network_gbs)} / {ppn} GPUs x "
            f"(n-1)/(n-{ppn}) with n = {n} (the part of each rank's data that leaves the node) = {_g(share)} GB/s")])]
    if coll == "sendrecv":
        return [Candidate("p2p", [intra, Bound("network", s.nic_gbs, f"the node-boundary pair crosses one NIC: "
                                               f"{s.nic_kind} {_g(s.rate_gbps or 0)} Gb/s / 8 x {s.efficiency:g} = "
                                               f"{_g(s.nic_gbs)} GB/s")])]
    return [Candidate("Ring", [intra, net])]


def expect(s: System, shape: RunShape) -> Expectation:
    """The expectation for one run; NotModeled when the model has no answer."""
    cands = candidates(s, shape)
    known = [c for c in cands if shape.algorithm and c.algorithm.lower() == shape.algorithm.lower()]
    assumptions = [
        f"system {s.name} ({s.file}): {s.description or s.gpu_model}",
        f"run: {shape.nodes} node(s) x {shape.ranks_per_node} rank(s) per node, {shape.collective}",
    ]
    if shape.ranks_per_node != s.gpus_per_node:
        assumptions.append(f"the run uses {shape.ranks_per_node} of the {s.gpus_per_node} GPUs per node; "
                           "per-GPU and per-node bounds are unchanged")
    if known:
        chosen = known[0]
        assumptions.append(f"algorithm {chosen.algorithm} ({shape.algorithm_from})")
    else:
        chosen = min(cands, key=lambda c: c.gbs)
        if len(cands) > 1:
            listed = ", ".join(f"{c.algorithm} {_g(c.gbs)}" for c in cands)
            why = (f"the log names algorithm {shape.algorithm}, which the model does not cover; "
                   if shape.algorithm else "the log does not say which algorithm NCCL used; ")
            assumptions.append(why + f"judged against the lowest of {listed} GB/s ({chosen.algorithm}); "
                               "NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING names it")
    for b in chosen.bounds:
        assumptions.append(f"{b.name} bound: {b.why}")
    if chosen.scale != 1.0:
        assumptions.append(chosen.scale_why)
    if shape.nodes > 1 and shape.collective in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce") \
            and chosen.algorithm in ("Ring", "Tree"):
        assumptions.append("across nodes a ring enters and leaves each node once per channel, so the per-node "
                           "network bandwidth (not a GPU's share of it) bounds busbw")
    if shape.nodes > 1 and s.within_nvlink_domain(shape.nodes):
        assumptions.append(f"{shape.nodes} nodes of {s.gpus_per_node} GPUs stay inside one NVLink domain of "
                           f"{s.nvlink_domain} GPUs: NCCL must connect them over multi-node NVLink (P2P, NVLS), "
                           "never over the NICs (NCCL_MNNVL_ENABLE=1 and an IMEX channel in every container)")
    elif shape.nodes > 1 and s.nics_per_node:
        if s.nic_kind == "EFA":
            assumptions.append("EFA: NCCL must use the Libfabric net plugin, never NET/Socket")
        else:
            assumptions.append(f"{s.nic_kind}: NCCL must use NET/IB"
                               + (" with GPUDirect RDMA (GDRDMA)" if s.gpudirect_rdma else "") + ", never NET/Socket")
        if not s.gpudirect_rdma:
            assumptions.append("GPUDirect RDMA off: traffic is staged in host memory; the network bound is an "
                               "upper bound")
    bound = chosen.limiting
    expected = chosen.gbs
    tol = s.tolerance
    assumptions.append(f"limiting: {bound.name} at {_g(expected)} GB/s; tolerance ±{tol:.0%} "
                       f"(band {_g(expected * (1 - tol))} .. {_g(expected * (1 + tol))} GB/s) from "
                       f"{format_size(s.bandwidth_from)} up")
    return Expectation(system=s, shape=shape, expected=expected, low=expected * (1 - tol),
                       high=expected * (1 + tol), algorithm=chosen.algorithm, bound=bound, candidates=cands,
                       bandwidth_from=s.bandwidth_from, assumptions=assumptions)


def expected_transports(s: System, nodes: int) -> list[str]:
    """The transports a multi-node run on this system must show (canonical names of nccl_log)."""
    if nodes > 1 and s.within_nvlink_domain(nodes):
        return ["P2P"]
    if nodes < 2 or not s.nics_per_node:
        return []
    if s.nic_kind == "EFA":
        return ["NET:Libfabric"]
    return ["IB", "GDRDMA"] if s.gpudirect_rdma else ["IB"]


def forbidden_transports(s: System, nodes: int) -> list[str]:
    """Transports a run on this system must not show: the NICs between nodes of one NVLink domain mean
    multi-node NVLink did not come up (no IMEX channel in the container, MNNVL off) and NCCL fell back."""
    if nodes > 1 and s.within_nvlink_domain(nodes):
        return ["IB", "Socket"]
    return []
