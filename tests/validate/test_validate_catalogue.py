"""The shipped system catalogue: every number cites a source, and every entry's derived expectations are
pinned to the figures its sources publish (nccl-tests/NCCL maintainers' numbers and measured runs)."""

from __future__ import annotations

import re

import pytest

from imagekit.validate import system as systems
from imagekit.validate.expect import RunShape, expect

CATALOGUE = sorted(systems.SHIPPED_DIR.glob("*.yaml"))


def _exp(name: str, nodes: int, algo: "str | None" = None, coll: str = "all_reduce"):
    s = systems.load(name)
    return expect(s, RunShape(nodes, s.gpus_per_node, coll, algo, "test"))


def _in_band(e, measured: float) -> bool:
    return e.low <= measured <= e.high


def test_catalogue_has_the_pinned_entries():
    """A new catalogue entry needs its own pinned test below."""
    assert {p.stem for p in CATALOGUE} == {"dgx-h100", "dgx-a100", "hgx-a100-4hdr", "dgx-b200", "dgx-1v", "dgx-2",
                                           "gb200-nvl72"}


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_every_number_cites_a_source_in_the_file(path):
    """Each line holding a number (or a fact like nvls/kind) carries a [source] comment naming a key of
    `sources:`; citations name projects and issues, never internet hosts."""
    text = path.read_text()
    model = systems.load(str(path))
    assert model.name == path.stem and model.sources
    body = text.split("\nsources:", 1)[0]
    facts = [line for line in body.splitlines()
             if re.match(r"\s+\w+:\s*(\d|true|false|NDR|HDR|EDR|XDR|RoCE|EFA)", line)]
    assert len(facts) >= 8
    for line in facts:
        cited = re.findall(r"\[([\w-]+)\]", line)
        assert cited, f"{path.name}: no [source] on {line.strip()!r}"
        for key in cited:
            assert key in model.sources, f"{path.name}: [{key}] is not a key of sources"
    assert not re.search(r"https?:|www\.|\.com\b|\.org\b", text)


def test_dgx_h100_pinned_to_cited_numbers():
    s = systems.load("dgx-h100")
    # nccl-tests #212: ~370 GB/s effective NVLink busbw without NVLS; NCCL topo.h: 18 x 20.6
    assert s.intra_gbs == pytest.approx(370.8) and abs(s.intra_gbs - 370) / 370 < 0.01
    assert s.nic_gbs == pytest.approx(48.0)  # nccl-tests #290: 46-48 GB/s per NDR NIC
    assert s.network_gbs == pytest.approx(384.0)
    one = _exp("dgx-h100", 1, "NVLS")
    assert one.expected == pytest.approx(480) and one.bound.name == "NVLS"  # #212: ~480 GB/s peak with NVLS
    assert _in_band(one, 476)  # #290: "476GB/s looks to be in the expected range"
    ring1 = _exp("dgx-h100", 1, "Ring")
    assert ring1.expected == pytest.approx(370.8) and ring1.bound.name == "NVLink"
    two = _exp("dgx-h100", 2, "NVLSTree")  # NCCL tuning.cc doubles NVLSTree's inter-node bw on 2 nodes
    assert two.expected == pytest.approx(480) and two.bound.name == "NVLS" and _in_band(two, 470)  # #309
    four = _exp("dgx-h100", 4, "Ring")
    assert four.expected == pytest.approx(370.8) and four.bound.name == "NVLink"
    assert _in_band(four, 365.84)  # #309: 4 nodes x 8 H100 with 8 NICs each
    assert _exp("dgx-h100", 4, "NVLSTree").bound.name == "network"  # 384 GB/s per node, no doubling
    unknown = _exp("dgx-h100", 1)  # without the algorithm, the lowest candidate: Ring
    assert unknown.algorithm == "Ring" and any("does not say" in a for a in unknown.assumptions)


def test_dgx_a100_pinned_to_cited_numbers():
    s = systems.load("dgx-a100")
    assert s.intra_gbs == pytest.approx(240.0)  # NCCL topo.h: 12 x SM80_NVLINK_BW 20.0
    one = _exp("dgx-a100", 1)
    assert one.expected == pytest.approx(240) and one.bound.name == "NVLink" and not s.nvls
    assert _in_band(one, 232.54)  # nccl-tests #175: 8 x A100 single node
    assert s.nic_gbs == pytest.approx(24.0)  # nccl-tests #119: 24 GB/s per HDR 200 NIC
    two = _exp("dgx-a100", 2, "Ring")
    assert two.expected == pytest.approx(192) and two.bound.name == "network"  # 8 x 24


def test_hgx_a100_4hdr_pinned_to_issue_119():
    three = _exp("hgx-a100-4hdr", 3, "Ring")
    assert three.expected == pytest.approx(96) and three.bound.name == "network"  # #119: "96GB/s is the target"
    assert all(_in_band(three, v) for v in (95.5, 95.75, 96.69))  # the run #119 posted


def test_dgx_b200_pinned_to_cited_numbers():
    s = systems.load("dgx-b200")
    assert s.intra_gbs == pytest.approx(721.8)  # NCCL #1807: maxBw 721.8 (18 x SM100_NVLINK_BW 40.1)
    one = _exp("dgx-b200", 1, "NVLS")
    assert one.expected == pytest.approx(830) and _in_band(one, 830)  # NCCL #1807: 830+ on 8 x B200
    assert _exp("dgx-b200", 3, "Ring").bound.name == "network"  # 8 x 48 = 384 < 721.8


def test_dgx_1v_pinned_to_cited_numbers():
    """4 x EDR across nodes: the network bounds it at NCCL's 12 GB/s per EDR NIC, and the seed guides' 42 GB/s
    (EDR behind PCIe gen 3) is in the band, with the algorithm unknown (Tree, the lowest) and with Ring: the
    V100/EDR entries carry a tolerance of 15 % for it."""
    s = systems.load("dgx-1v")
    assert s.intra_gbs == pytest.approx(120.0)  # 6 NVLink 2 links x SM70_NVLINK_BW 20.0
    assert s.nic_gbs == pytest.approx(12.0) and s.network_gbs == pytest.approx(48.0)  # NET_BW 12 per 100 Gb/s
    one = _exp("dgx-1v", 1)
    assert one.bound.name == "NVLink" and "hybrid cube-mesh" in one.bound.why
    two = _exp("dgx-1v", 2)
    assert two.algorithm == "Tree" and two.bound.name == "network" and _in_band(two, 42)  # the seed guides
    assert _in_band(_exp("dgx-1v", 2, "Ring"), 42)


def test_dgx_2_pinned_to_cited_numbers():
    s = systems.load("dgx-2")
    assert s.gpus_per_node == 16 and s.intra_gbs == pytest.approx(120.0) and not s.nvls
    assert s.network_gbs == pytest.approx(96.0)  # 8 x EDR at NCCL's 12 GB/s per 100 Gb/s
    two = _exp("dgx-2", 2)
    assert two.algorithm == "Tree" and two.bound.name == "network" and _in_band(two, 82)  # the seed guides
    assert _in_band(_exp("dgx-2", 2, "Ring"), 82) and not _in_band(_exp("dgx-2", 2, "Ring"), 80)
    assert _exp("dgx-2", 1).bound.name == "NVLink"


def test_busbw_factors_are_nccl_tests():
    """nccl-tests doc/PERFORMANCE.md and src/*.cu GetBw."""
    from imagekit.validate.expect import BUSBW_FACTOR

    n = 16
    assert BUSBW_FACTOR["all_reduce"](n) == pytest.approx(2 * 15 / 16)
    for coll in ("all_gather", "reduce_scatter", "alltoall"):
        assert BUSBW_FACTOR[coll](n) == pytest.approx(15 / 16)
    for coll in ("broadcast", "reduce", "sendrecv"):
        assert BUSBW_FACTOR[coll](n) == 1.0


def test_alltoall_across_nodes_is_bounded_by_each_gpus_share_of_the_network():
    e = _exp("dgx-h100", 2, coll="alltoall")
    # 384 GB/s per node / 8 GPUs x (16-1)/(16-8): the half of each rank's data that leaves the node
    assert e.expected == pytest.approx(384 / 8 * 15 / 8) and e.bound.name == "network"


def test_the_docs_worked_example_matches_the_model():
    """docs/validate.md's step-by-step arithmetic for dgx-h100 is what the model computes."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "validate.md").read_text()
    e = _exp("dgx-h100", 2, "Ring")
    assert e.expected == pytest.approx(370.8) and e.bound.name == "NVLink"
    assert (round(e.low, 1), round(e.high, 1)) == (333.7, 407.9)
    assert "= min(370.8, 384) = 370.8 GB/s, NVLink-bound; band 333.7–407.9 GB/s" in readme
    assert round(_exp("dgx-h100", 2).expected, 1) == 341.1 and "= 341.1 GB/s" in readme
    assert 197.76 * 30 / 16 == pytest.approx(370.8) and "197.76 × 30/16 = 370.8" in readme
    assert _exp("dgx-h100", 2, "NVLSTree").expected == pytest.approx(480)


def test_gb200_nvl72_pinned_to_cited_numbers():
    """One NVLink domain of 72 GPUs on 18 trays of 4: up to 18 nodes the run stays on NVLink (no NIC bound);
    CoreWeave's full-rack run (72 ranks, 835-847 GB/s at 4-8 GiB) is NVLS's band; two racks meet the NICs."""
    s = systems.load("nvl72")   # its alias
    assert (s.name, s.gpus_per_node, s.nvlink_domain) == ("gb200-nvl72", 4, 72)
    assert s.intra_gbs == pytest.approx(18 * 40.1) and s.network_gbs == pytest.approx(4 * 48.0)
    rack = _exp("gb200-nvl72", 18)
    assert {c.algorithm for c in rack.candidates} == {"Ring", "NVLS"}
    assert all(b.name != "network" for c in rack.candidates for b in c.bounds)
    assert _in_band(_exp("gb200-nvl72", 18, "NVLS"), 835) and _in_band(_exp("gb200-nvl72", 18, "NVLS"), 846.82)
    assert s.within_nvlink_domain(18) and not s.within_nvlink_domain(19)
    two_racks = _exp("gb200-nvl72", 36)
    assert two_racks.bound.name == "network"


def test_v100_systems_name_the_stack_built_for_them():
    """DGX-1 and DGX-2 are V100 (sm_70), which CUDA 13 cannot target: their entries name the shipped stack
    that carries sm_70 code, and `--system dgx-1` finds the DGX-1 model by its alias."""
    from imagekit import stack as stack_mod

    for name in ("dgx-1", "dgx-2"):
        s = systems.load(name)
        assert s.stacks == ["nccl-tests-volta"]
        for ref in s.stacks:
            built = stack_mod.load(ref)
            assert "70" in built.get("nccl-tests").archs and built.get("cuda").major == "12"
