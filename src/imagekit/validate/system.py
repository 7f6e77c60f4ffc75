"""System models: how a GPU system is built, from a shipped catalogue or a site's own YAML file.

A model names what bounds collective bandwidth: GPUs per node, the intra-node
fabric (NVLink through NVSwitch, with or without NVLink SHARP, or PCIe), and the
NICs per node with their line rate. ``imagekit.validate.expect`` turns it into
the bus bandwidth a run should reach. Systems are found by name on a search path
like stacks: ``--systems-dir``, then ``$IMAGEKIT_SYSTEMS_PATH`` (os.pathsep-separated),
then the shipped catalogue (``imagekit/data/systems``); or given as a path.

Every error names the file, the line and the key (exit 2).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from imagekit.util import schema, searchpath, yamlpos
from imagekit.util.errors import StackError
from imagekit.util.settings import SYSTEMS_PATH_ENV, Site, site_or_env
from imagekit.util.sizes import parse_size
from imagekit.validate.system_yaml import Key, SectionReader

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "systems"
PATH_ENV = SYSTEMS_PATH_ENV

# nvswitch: every GPU reaches every other through NVSwitches; nvlink: a bridged pair; cube-mesh: DGX-1's
# hybrid cube-mesh, where each GPU's links go to some of the others, and NCCL's rings still use all of them.
FABRICS = ("nvswitch", "nvlink", "cube-mesh", "pcie")
# Line rate per InfiniBand generation (Gb/s, 4x port); RoCE and EFA name no rate, so they need rate_gbps.
IB_RATES = {"EDR": 100, "HDR": 200, "NDR": 400, "XDR": 800}
NIC_KINDS = (*IB_RATES, "RoCE", "EFA")
# PCIe x16 bandwidth per direction that NCCL's topology model assigns (src/graph/topo.cc kvDictPciGen:
# 120 / 240 / 480 x 100 Mbit/s per lane for 16 / 32 / 64 GT/s), in GB/s.
PCIE_X16_GBS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
DEFAULT_TOLERANCE = 0.10  # nccl-tests' own -G check fails an average below 90 % of the reference
DEFAULT_BANDWIDTH_FROM = 1 << 30  # nccl-tests #212: 256 MiB is too small to reach peak bandwidth


@dataclass
class System:
    name: str
    file: str
    description: str = ""
    gpus_per_node: int = 0
    gpu_model: str = ""
    fabric: str = "nvswitch"
    nvlink_generation: Optional[int] = None
    nvlink_links: Optional[int] = None
    nvlink_link_busbw: Optional[float] = None  # GB/s per link
    nvls: bool = False
    nvls_busbw: Optional[float] = None  # GB/s, all_reduce with NVLink SHARP
    # GPUs that share one NVLink fabric across nodes (GB200/GB300 NVL72: 72 GPUs on 18 trays of 4); None
    # when NVLink ends at the node. Within it, nodes talk over NVLink (multi-node NVLink), not the NICs.
    nvlink_domain: Optional[int] = None
    pcie_generation: Optional[int] = None
    nics_per_node: int = 0
    nic_kind: Optional[str] = None
    rate_gbps: Optional[float] = None
    efficiency: float = 0.96
    gpudirect_rdma: bool = False
    tolerance: float = DEFAULT_TOLERANCE
    bandwidth_from: int = DEFAULT_BANDWIDTH_FROM
    sources: dict[str, str] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)   # other names `--system` finds it by
    stacks: list[str] = field(default_factory=list)    # shipped stacks (matrix row ids) CI validates on it
    lines: dict[str, int] = field(default_factory=dict)  # dotted key -> line, for messages

    def within_nvlink_domain(self, nodes: int) -> bool:
        """True when a run on ``nodes`` nodes (all their GPUs) stays inside one multi-node NVLink domain."""
        return bool(self.nvlink_domain) and nodes * self.gpus_per_node <= (self.nvlink_domain or 0)

    @property
    def nic_gbs(self) -> float:
        """Bandwidth NCCL reaches per NIC, GB/s: line rate / 8 x efficiency."""
        return (self.rate_gbps or 0.0) / 8.0 * self.efficiency

    @property
    def network_gbs(self) -> float:
        """Per-node network bandwidth, GB/s."""
        return self.nics_per_node * self.nic_gbs

    @property
    def intra_gbs(self) -> float:
        """Per-GPU intra-node bandwidth without NVLS, GB/s (ring busbw bound)."""
        if self.fabric == "pcie":
            return PCIE_X16_GBS[self.pcie_generation or 4]
        return (self.nvlink_links or 0) * (self.nvlink_link_busbw or 0.0)


# -- locating ----------------------------------------------------------------------------------
def search_path(site: Site | None = None) -> list[Path]:
    """The site's system directories (--systems-dir, then $IMAGEKIT_SYSTEMS_PATH), then the catalogue
    (default: the environment's site, :meth:`Site.from_env`)."""
    return [*site_or_env(site).system_dirs, SHIPPED_DIR]


def available(site: Site | None = None) -> dict[str, Path]:
    """Every system name on the search path; an earlier directory hides the same name further on."""
    return {name: path for name, (path, _directory) in searchpath.files(search_path(site)).items()}


def find(ref: str, site: Site | None = None) -> Path:
    path = Path(ref)
    if path.suffix in searchpath.SUFFIXES or os.sep in ref or path.is_file():
        if not path.is_file():
            raise StackError("system file not found", file=ref,
                             hint=f"known systems: {', '.join(available(site)) or 'none'}")
        return path
    known = available(site)
    if ref in known:
        return known[ref]
    aliased = _aliases(known).get(ref)
    if aliased is not None:
        return aliased
    close = difflib.get_close_matches(ref, list(known), n=1, cutoff=0.5)
    raise StackError(f"unknown system {ref!r}", key="--system",
                     hint=(f"did you mean {close[0]!r}? " if close else "")
                     + f"known systems: {', '.join(known)} (or give a path to a .yaml file; "
                       f"site directories: --systems-dir DIR or ${PATH_ENV})")


def _aliases(known: dict[str, Path]) -> dict[str, Path]:
    """Alias -> file, from each model's top-level `aliases:` (read without checking the rest: a broken
    model elsewhere on the path must not stop the lookup of a good one)."""
    out: dict[str, Path] = {}
    for path in known.values():
        try:
            data = yamlpos.load(path)
        except StackError:
            continue
        names = data.get("aliases") if isinstance(data, dict) else None
        for alias in names if isinstance(names, list) else []:
            out.setdefault(str(alias), path)
    return out


def for_row(row_id: str, site: Site | None = None) -> str | None:
    """The system model a CI leg (a row of ``imagekit matrix``) is validated against: the first model on
    the search path whose ``stacks:`` names the row's id (a variant, with ``-arm64`` for the arm64 row of
    a multi-arch stack: one image, two systems); None when none does. Read without checking the rest of
    each model, as aliases are: a broken model elsewhere must not stop the lookup."""
    named: dict[str, str] = {}
    for name, path in available(site).items():
        try:
            data = yamlpos.load(path)
        except StackError:
            continue
        listed = data.get("stacks") if isinstance(data, dict) else None
        for ref in listed if isinstance(listed, list) else []:
            named.setdefault(str(ref), str(data.get("name") or name))
    return named.get(row_id)


def load(ref: "str | Path", site: Site | None = None) -> System:
    """A system by name (``site``'s search path) or path; StackError (exit 2) naming file, line and key."""
    path = find(str(ref), site)
    data = yamlpos.load(path)
    return from_dict(data, str(path), default_name=path.stem)


# -- checking ------------------------------------------------------------------------------------
_TOP = {"name", "description", "aliases", "stacks", "gpus", "intra_node", "network", "tolerance", "bandwidth_from",
        "sources"}
_GPUS = {"per_node", "model"}
_INTRA = {"fabric", "nvlink_generation", "nvlink_links", "nvlink_link_busbw", "nvls", "nvls_busbw",
          "pcie_generation", "nvlink_domain"}
_NETWORK = {"nics_per_node", "kind", "rate_gbps", "efficiency", "gpudirect_rdma"}


def from_dict(data: Any, file: str = "<system>", default_name: str = "") -> System:
    """Check a parsed model (a yamlpos PosDict keeps line numbers) and return the System."""
    r = SectionReader(file)
    if not isinstance(data, dict):
        raise StackError("a system model is a mapping (gpus, intra_node, network)", file=file)

    for k in data:
        if k not in _TOP:
            raise schema.unknown_key(data, str(k), sorted(_TOP), "")
    gpus = r.mapping(data, "gpus", data, _GPUS)
    intra = r.mapping(data, "intra_node", data, _INTRA)
    net = r.mapping(data, "network", data, _NETWORK, required=False)
    s = System(name=r.get(data, "", Key("name", str, default=default_name)) or default_name, file=file,
               description=r.get(data, "", Key("description", str, default="")))
    s.gpus_per_node = r.get(gpus, "gpus", Key("per_node", int, required=True, low=1, high=1024))
    s.gpu_model = r.get(gpus, "gpus", Key("model", str, required=True))
    s.fabric = r.get(intra, "intra_node", Key("fabric", str, required=True, choices=FABRICS))
    s.nvlink_generation = r.get(intra, "intra_node", Key("nvlink_generation", int, low=1, high=10))
    s.nvlink_links = r.get(intra, "intra_node", Key("nvlink_links", int, low=1, high=64))
    s.nvlink_link_busbw = r.get(intra, "intra_node", Key("nvlink_link_busbw", float, low=0.1, high=1000))
    s.nvls = r.get(intra, "intra_node", Key("nvls", bool, default=False))
    s.nvls_busbw = r.get(intra, "intra_node", Key("nvls_busbw", float, low=1, high=100000))
    s.pcie_generation = r.get(intra, "intra_node", Key("pcie_generation", int, low=3, high=6))
    s.nvlink_domain = r.get(intra, "intra_node", Key("nvlink_domain", int, low=2, high=100000))
    if net:
        s.nics_per_node = r.get(net, "network", Key("nics_per_node", int, required=True, low=0, high=128))
        s.nic_kind = r.get(net, "network", Key("kind", str, required=s.nics_per_node > 0, choices=NIC_KINDS))
        s.rate_gbps = r.get(net, "network", Key("rate_gbps", float, low=1, high=100000))
        s.efficiency = r.get(net, "network", Key("efficiency", float, default=0.96, low=0.01, high=1.0))
        s.gpudirect_rdma = r.get(net, "network", Key("gpudirect_rdma", bool, default=False))
    s.tolerance = r.get(data, "", Key("tolerance", float, default=DEFAULT_TOLERANCE, low=0.01, high=0.5))
    if data.get("bandwidth_from") is not None:
        try:
            s.bandwidth_from = parse_size(data["bandwidth_from"])
        except ValueError as exc:
            raise r.error(data, "bandwidth_from", "", str(exc)) from None
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise r.error(data, "sources", "", "expected a mapping of source key -> citation")
    s.sources = {str(k): str(v) for k, v in sources.items()}
    for key in ("aliases", "stacks"):
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise r.error(data, key, "", "expected a list of names", hint=f"e.g. `{key}: [name]`")
        setattr(s, key, list(value))
    s.lines = r.lines
    _contradictions(s, r, gpus, intra, net)
    return s


def _contradictions(s: System, r: SectionReader, gpus: dict, intra: dict, net: dict) -> None:
    """Fields that are each valid but cannot all be true of one system."""
    nvlink_keys = [k for k in ("nvlink_generation", "nvlink_links", "nvlink_link_busbw") if intra.get(k) is not None]
    if s.fabric == "pcie":
        if s.nvls:
            raise r.error(intra, "nvls", "intra_node", f"NVLS on a PCIe system: NVLink SHARP needs an NVSwitch "
                          f"(intra_node.fabric is pcie, with {s.gpus_per_node} GPUs per node)",
                          hint="set fabric: nvswitch, or nvls: false")
        if nvlink_keys:
            raise r.error(intra, nvlink_keys[0], "intra_node", "NVLink figures on a PCIe system (fabric: pcie)",
                          hint="drop the nvlink_* keys, or set fabric: nvswitch / nvlink")
        if s.pcie_generation is None:
            raise r.error(intra, None, "intra_node", "missing required key 'pcie_generation' (fabric: pcie)",
                          hint="add `pcie_generation: 4` (3, 4, 5 or 6)")
    else:
        for key in ("nvlink_links", "nvlink_link_busbw"):
            if intra.get(key) is None:
                raise r.error(intra, None, "intra_node", f"missing required key {key!r} (fabric: {s.fabric})",
                              hint="nvlink_links: NVLinks per GPU; nvlink_link_busbw: GB/s NCCL reaches per link")
        if s.pcie_generation is not None:
            raise r.error(intra, "pcie_generation", "intra_node", f"pcie_generation with fabric: {s.fabric}",
                          hint="GPUs talk over NVLink here; drop pcie_generation or set fabric: pcie")
    if s.nvlink_domain is not None:
        if s.fabric != "nvswitch":
            raise r.error(intra, "nvlink_domain", "intra_node", f"an NVLink domain across nodes needs NVLink "
                          f"switches (fabric: {s.fabric})", hint="set fabric: nvswitch, or drop nvlink_domain")
        if s.nvlink_domain % s.gpus_per_node:
            raise r.error(intra, "nvlink_domain", "intra_node", f"an NVLink domain of {s.nvlink_domain} GPUs is not "
                          f"a whole number of {s.gpus_per_node}-GPU nodes",
                          hint="nvlink_domain: the GPUs of every node in it (NVL72: 72 = 18 trays x 4)")
    if s.nvls and s.fabric != "nvswitch":
        raise r.error(intra, "nvls", "intra_node", f"NVLS without an NVSwitch (fabric: {s.fabric})",
                      hint="NVLink SHARP is done in the NVSwitch: set fabric: nvswitch, or nvls: false")
    if s.nvls and s.nvls_busbw is None:
        raise r.error(intra, "nvls", "intra_node", "nvls: true needs nvls_busbw (the all_reduce busbw NVLS reaches)",
                      hint="add nvls_busbw: GB/s, with its source")
    if not s.nvls and s.nvls_busbw is not None:
        raise r.error(intra, "nvls_busbw", "intra_node", "nvls_busbw given but nvls is false",
                      hint="set nvls: true, or drop nvls_busbw")
    if s.fabric == "nvlink" and s.gpus_per_node > 2:
        raise r.error(gpus, "per_node", "gpus", f"{s.gpus_per_node} GPUs on direct NVLink (fabric: nvlink) are not "
                      "all connected to each other at full bandwidth; the model covers NVLink bridges of 2 GPUs",
                      hint="use fabric: nvswitch for NVSwitch systems, cube-mesh for DGX-1's 8 GPUs, or a "
                           "baseline file")
    if s.fabric == "cube-mesh" and s.gpus_per_node != 8:
        raise r.error(gpus, "per_node", "gpus", f"a hybrid cube-mesh (fabric: cube-mesh) joins 8 GPUs, "
                      f"not {s.gpus_per_node}", hint="set per_node: 8, or the fabric the system has")
    if net:
        if s.nics_per_node > 0:
            kind = s.nic_kind or ""
            if kind in IB_RATES:
                if s.rate_gbps is None:
                    s.rate_gbps = float(IB_RATES[kind])
                elif s.rate_gbps != IB_RATES[kind]:
                    raise r.error(net, "rate_gbps", "network", f"{kind} InfiniBand runs at {IB_RATES[kind]} Gb/s, "
                                  f"not {s.rate_gbps:g}", hint=f"set rate_gbps: {IB_RATES[kind]}, or the kind that "
                                  f"matches ({', '.join(f'{k} {v}' for k, v in IB_RATES.items())})")
            elif s.rate_gbps is None:
                raise r.error(net, None, "network", f"missing required key 'rate_gbps' (kind {kind} has no fixed rate)",
                              hint="add rate_gbps: the NIC's line rate in Gb/s, e.g. 400")
        elif s.gpudirect_rdma:
            raise r.error(net, "gpudirect_rdma", "network", "GPUDirect RDMA with no NICs (nics_per_node: 0)",
                          hint="set nics_per_node, or gpudirect_rdma: false")
