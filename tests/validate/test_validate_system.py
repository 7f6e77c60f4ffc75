"""`imagekit validate --system`: calibrated verdicts on outputs generated in nccl-tests' published formats
(text, -I per-iteration text, -J JSON versions 1-3) at the band, below it and with a planted straggler;
bad models and unknown JSON versions; stragglers, spikes and the spread of repeated runs.

No GPU or fabric exists here: nccl-tests and NCCL_DEBUG=INFO output is generated following nccl-tests'
src/util.cu and NCCL's log formats (see validate_gen.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.util.errors import StackError
from imagekit.validate import Gates, evaluate, parse
from imagekit.validate import system as systems
from imagekit.validate.parse import merge
from helpers.validate_gen import Spec, nccl_log, nccl_tests_json, nccl_tests_output

H100_2N = ("gpu-01", "gpu-07")


def _spec(peak: float, **kw) -> Spec:
    base = dict(style="new", version="2.19.6", hosts=H100_2N, check=False, peak_busbw=peak)
    base.update(kw)
    return Spec(**base)


def _invoke(*args: str, stdin: str = "") -> "tuple[int, str, str]":
    res = CliRunner().invoke(main, ["validate", *args], input=stdin, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def _log(**kw) -> str:
    return nccl_log("GDRDMA", hosts=H100_2N, gpus=8, **kw)


# -- verdicts per format -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["text", "text-I", "json1", "json2", "json3"])
def test_at_the_band_passes_below_it_is_slow(tmp_path, fmt):
    """2 x 8 H100 with NCCL_ALGO=Ring: 370.8 GB/s expected (NVLink-bound, network 384)."""
    def files(peak: float) -> list[str]:
        spec = _spec(peak, per_iter=fmt != "text" and fmt != "json1")
        log = tmp_path / f"{fmt}-{peak}.log"
        text, _ = nccl_tests_output(spec)
        if fmt.startswith("json"):
            data, _ = nccl_tests_json(spec, version=int(fmt[-1]))
            js = tmp_path / f"{fmt}-{peak}.json"
            js.write_text(data)
            log.write_text(text + _log(env_algo="Ring"))
            return [str(log), str(js)]
        log.write_text(text + _log(env_algo="Ring"))
        return [str(log)]

    code, out, _ = _invoke(*files(372), "--system", "dgx-h100")
    assert code == 0, out
    assert "of what 2 x 8 H100 with 8 x NDR (dgx-h100) should reach" in out and "NVLink-bound" in out
    assert "assumes algorithm Ring (NCCL_ALGO set by environment to Ring)" in out
    assert "assumes network bound: 8 x NDR 400 Gb/s / 8 x 0.96 = 8 x 48 = 384 GB/s per node" in out
    code, out, _ = _invoke(*files(300), "--system", "dgx-h100", "--json")
    data = json.loads(out)
    assert code == 1 and data["outcome"] == "slow"
    [f] = data["verdict"]["failures"]
    assert f["check"] == "band" and f["kind"] == "performance" and "NVLink-bound" in f["message"]
    [exp] = data["verdict"]["expectations"]
    assert exp["expected_busbw"] == pytest.approx(370.8) and exp["band"] == [pytest.approx(333.72), pytest.approx(407.88)]


def test_json_and_its_stdout_are_one_run_not_two(tmp_path):
    spec = _spec(372, per_iter=True)
    text, _ = nccl_tests_output(spec)
    data, _ = nccl_tests_json(spec)
    result = merge([parse(text + _log(), "out.log"), parse(data, "out.json")])
    assert [r.format for r in result.nccl_tests] == ["json"] and result.transport.counts["GDRDMA"]


def test_planted_straggler_node_is_named(tmp_path):
    spec = _spec(372, per_iter=True, slow={"gpu-07": 1.3})
    data, _ = nccl_tests_json(spec)
    (tmp_path / "r.json").write_text(data)
    (tmp_path / "r.log").write_text(_log(env_algo="Ring"))
    code, out, _ = _invoke(str(tmp_path / "r.log"), str(tmp_path / "r.json"), "--system", "dgx-h100")
    assert code == 1 and "verdict: FAIL (ran right but slow)" in out
    assert "node gpu-07 is the straggler: its time is 30% above" in out


def test_planted_straggler_process_and_a_spike(tmp_path):
    spec = _spec(372, per_iter=True, slow={3: 1.4}, spikes={(1 << 30, 7): (5, 3.0)})
    data, _ = nccl_tests_json(spec)
    result = parse(data, "r.json")
    verdict = evaluate(result, Gates(min_busbw=1))
    assert [f.check for f in verdict.failures] == ["straggler"]
    assert "process 3 (rank 3 on gpu-01) is the straggler" in verdict.failures[0].message
    assert any("spike at 1 GiB (out-of-place), iteration 7" in n and "process 5 on gpu-01" in n for n in verdict.notes)
    # the text -I table shows the spike (i_max far above the average), not who caused it
    text, _ = nccl_tests_output(spec)
    verdict = evaluate(parse(text), Gates(min_busbw=1))
    assert any("spike at 1 GiB (out-of-place): slowest iteration" in n for n in verdict.notes)


def test_healthy_per_iteration_run_has_no_straggler():
    data, _ = nccl_tests_json(_spec(372, per_iter=True))
    verdict = evaluate(parse(data, "r.json"), Gates(min_busbw=1))
    assert verdict.ok and not [n for n in verdict.notes if "spike" in n]


# -- ran wrong -------------------------------------------------------------------------------------
def test_socket_fallback_is_ran_wrong_even_when_fast(tmp_path):
    text, _ = nccl_tests_output(_spec(372))
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text + nccl_log("Socket", hosts=H100_2N, gpus=8))
    assert code == 9 and "verdict: FAIL (ran wrong)" in out and "expected transport IB not used" in out


def test_system_without_nccl_log_notes_the_transport_as_not_checked():
    """Nothing ran wrong when the transport was just not logged: the system's IB is a note, not a failure."""
    text, _ = nccl_tests_output(_spec(372))
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text)
    assert code == 0, out
    assert "transport not checked: no NCCL_DEBUG=INFO lines in the input; system dgx-h100 needs IB, GDRDMA" in out


def test_asked_transport_is_a_gate_that_needs_the_nccl_log():
    """A gate never passes on missing data: asked for IB by name, no NCCL_DEBUG=INFO lines, no proof of IB."""
    text, _ = nccl_tests_output(_spec(372))
    code, out, _ = _invoke("-", "--system", "dgx-h100", "--expect-transport", "IB", stdin=text)
    assert code == 9 and "cannot check transport IB: no NCCL_DEBUG=INFO lines" in out


def _without_ranks(text: str) -> str:
    """A published table: the results without nccl-tests' '# Using devices' rank list."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("# Using devices") and not line.lstrip("# ").startswith("Rank"))


def test_output_without_ranks_needs_the_shape():
    text, _ = nccl_tests_output(_spec(372))
    table = _without_ranks(text)
    assert "Rank" not in table
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=table)
    assert code == 9 and "no rank list ('# Using devices')" in out and "or --nodes N (and --gpus-per-node G)" in out


def test_nodes_and_gpus_per_node_give_the_shape_of_a_table_without_ranks():
    """2 x 8 H100 (the whole node by default) is judged like the listed run; 2 x 4 too (the bounds are per
    GPU and per node); the network bound applies only because --nodes says 2."""
    text, _ = nccl_tests_output(_spec(372))
    table = _without_ranks(text) + _log(env_algo="Ring")
    code, out, _ = _invoke("-", "--system", "dgx-h100", "--nodes", "2", stdin=table)
    assert code == 0, out
    assert "judged as 2 node(s) x 8 rank(s) (--nodes, all 8 GPUs of dgx-h100)" in out
    assert "of what 2 x 8 H100 with 8 x NDR (dgx-h100) should reach" in out
    code, out, _ = _invoke("-", "--system", "dgx-h100", "--nodes", "2", "--gpus-per-node", "4", stdin=table)
    assert code == 0 and "judged as 2 node(s) x 4 rank(s) (--nodes, --gpus-per-node)" in out
    code, out, _ = _invoke("-", "--system", "dgx-h100", "--nodes", "1", "--gpus-per-node", "16", stdin=table)
    assert code == 9 and "16 ranks on one node, and system dgx-h100 has 8 GPUs per node" in out


@pytest.mark.parametrize("system, hosts, gpus, gpu, busbw", [
    ("dgx-1v", ("dgx1-a", "dgx1-b"), 8, "Tesla V100-SXM2-32GB", 42.0),
    ("dgx-2", ("dgx2-a", "dgx2-b"), 16, "Tesla V100-SXM3-32GB", 82.0),
])
def test_the_seed_guides_tables_are_judged(system, hosts, gpus, gpu, busbw):
    """The seed guides validate DGX-1 (4 x IB, 42 GB/s) and DGX-2/DGX-2H (8 x IB, 82 GB/s) with published tables
    that list no ranks and carry no NCCL log: with --nodes they pass, and the transport is noted as not checked."""
    def table(peak: float) -> str:
        text, _ = nccl_tests_output(Spec(style="new", version="2.19.6", hosts=hosts, gpus_per_host=gpus,
                                         check=False, peak_busbw=peak, gpu=gpu))
        return _without_ranks(text)

    code, out, _ = _invoke("-", "--system", system, "--nodes", "2", stdin=table(busbw))
    assert code == 0, out
    assert f"of what 2 x {gpus} V100 with" in out and "transport not checked" in out
    code, out, _ = _invoke("-", "--system", system, "--nodes", "2", stdin=table(busbw * 0.7))
    assert code == 1 and "below the band" in out, out


def test_a_cube_mesh_joins_eight_gpus(tmp_path):
    path = tmp_path / "mesh.yaml"
    path.write_text((systems.SHIPPED_DIR / "dgx-1v.yaml").read_text().replace("per_node: 8 ", "per_node: 4 "))
    with pytest.raises(StackError, match="a hybrid cube-mesh .* joins 8 GPUs, not 4") as info:
        systems.load(str(path))
    assert info.value.key == "gpus.per_node" and info.value.line == 7


def test_the_rank_list_wins_over_nodes():
    text, _ = nccl_tests_output(_spec(372))
    code, out, _ = _invoke("-", "--system", "dgx-h100", "--nodes", "4", stdin=text + _log(env_algo="Ring"))
    assert code == 0, out
    assert "the output lists 2 node(s) x 8 rank(s); --nodes/--gpus-per-node ignored for it" in out


@pytest.mark.parametrize("args, message", [
    (("--nodes", "2"), "--nodes/--gpus-per-node give the run's shape to --system, which is missing"),
    (("--system", "dgx-h100", "--gpus-per-node", "4"), "--gpus-per-node needs --nodes"),
    (("--system", "dgx-h100", "--nodes", "0"), "0 is not in the range x>=1"),
])
def test_shape_options_bad_input(args, message):
    code, out, err = _invoke("-", *args, stdin="x\n")
    assert code == 2 and message in out + err


def test_run_that_stops_before_the_band_has_no_data_to_pass_on():
    text, _ = nccl_tests_output(_spec(372, maxb=256 << 20))
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text + _log())
    assert code == 9 and "the largest size is 256 MiB, and the band of dgx-h100 starts at 1 GiB" in out


def test_wrong_gpus_for_the_system():
    text, _ = nccl_tests_output(_spec(372, gpu="NVIDIA A100-SXM4-80GB"))
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text + _log())
    assert code == 9 and "ran on 'NVIDIA A100-SXM4-80GB', and system dgx-h100 has H100 GPUs" in out


def test_seed_style_excerpt_without_footer_is_truncated_with_its_numbers():
    text, exp = nccl_tests_output(_spec(372, footer=False, stop_after=29))
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text + _log(env_algo="Ring"))
    assert code == 9 and "TRUNCATED" in out and "without '# Avg bus bandwidth'" in out
    assert f"{exp.oop_busbw[-1]:.2f}" in out  # its numbers are still reported, and judged
    assert "within the band" in out


def test_truncated_json_is_read_up_to_the_cut():
    data, _ = nccl_tests_json(_spec(372, footer=False, stop_after=29))
    [run] = parse(data, "cut.json").nccl_tests
    assert run.truncated and len(run.rows) >= 27 and run.format == "json"


# -- single node, algorithm from the tuning log ------------------------------------------------------
def test_single_node_nvls_from_the_tuning_log():
    text, _ = nccl_tests_output(_spec(478, hosts=("gpu-01",)))
    log = nccl_log("P2P", hosts=("gpu-01",), gpus=8, algo="NVLS")
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=text + log)
    assert code == 0 and "NVLS-bound" in out and "NCCL's tuning log chose NVLS" in out
    code, out, _ = _invoke("-", "--system", "dgx-h100", stdin=_spec_text(400) + log)
    assert code == 1 and "83% of what 1 x 8 H100 (dgx-h100) should reach" in out


def _spec_text(peak: float) -> str:
    return nccl_tests_output(_spec(peak, hosts=("gpu-01",)))[0]


# -- several runs ---------------------------------------------------------------------------------
def test_repeatable_runs_pass_and_spread_runs_fail(tmp_path):
    paths = []
    for i, peak in enumerate((372, 371, 373, 300)):
        p = tmp_path / f"run{i}.log"
        p.write_text(nccl_tests_output(_spec(peak))[0] + _log(env_algo="Ring"))
        paths.append(str(p))
    code, out, _ = _invoke(*paths[:3], "--system", "dgx-h100", "--min-runs", "3")
    assert code == 0 and "repeatable: all_reduce on 2 node(s) x 8: 3 runs" in out
    code, out, _ = _invoke(*paths, "--system", "dgx-h100")
    assert code == 1 and "not repeatable" in out and "run4.log" not in out  # named by run label
    code, out, _ = _invoke(paths[0], "--system", "dgx-h100", "--min-runs", "3")
    assert code == 9 and "ran 1 time(s)" in out


# -- bad input: exit 2 naming file, line and key ----------------------------------------------------
def test_unknown_system_says_did_you_mean():
    code, _, err = _invoke("-", "--system", "dgx-h10", stdin="x")
    assert code == 2 and "unknown system 'dgx-h10'" in err and "did you mean 'dgx-h100'" in err


def test_unknown_json_version_names_file_line_key(tmp_path):
    data, _ = nccl_tests_json(_spec(372))
    bad = tmp_path / "future.json"
    bad.write_text(data.replace('{"version":3,', '{"version":4,', 1))
    code, _, err = _invoke(str(bad))
    assert code == 2 and f"{bad}:1: version: unknown nccl-tests JSON version 4" in err
    assert "2.19.6" in err


@pytest.mark.parametrize("edit, where, words", [
    (lambda t: t.replace("fabric: nvswitch", "fabric: pcie\n  pcie_generation: 5").replace(
        "  nvlink_generation: 4", "").replace("  nvlink_links: 18", "").replace("  nvlink_link_busbw: 20.6", ""),
     "intra_node.nvls", "NVLS on a PCIe system"),
    (lambda t: t.replace("  per_node: 8 ", "  per_nodes: 8 "), "gpus.per_nodes", "did you mean 'per_node'"),
    (lambda t: t.replace("  nvlink_links: 18 ", "  nvlink_links: x  "), "intra_node.nvlink_links", "expected an integer"),
    (lambda t: t.replace("  rate_gbps: 400 ", "  rate_gbps: 200 "), "network.rate_gbps", "NDR InfiniBand runs at 400"),
    (lambda t: t.replace("  model: H100 ", "  model:      "), "gpus", "missing required key 'model'"),
    (lambda t: t.replace("  nvls_busbw: 480 ", "  # nvls_busbw "), "intra_node.nvls", "needs nvls_busbw"),
])
def test_bad_models_name_file_line_and_key(tmp_path, edit, where, words):
    text = edit((systems.SHIPPED_DIR / "dgx-h100.yaml").read_text())
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(StackError) as err:
        systems.load(str(path))
    assert err.value.file == str(path) and err.value.line and words in str(err.value)
    assert err.value.key == where or err.value.key.startswith(where)
    code, _, out = _invoke("-", "--system", str(path), stdin="x")
    assert code == 2 and f"{path}:{err.value.line}:" in out


def test_site_directories_come_first(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    text = (systems.SHIPPED_DIR / "dgx-a100.yaml").read_text().replace("nics_per_node: 8", "nics_per_node: 2")
    (site / "dgx-a100.yaml").write_text(text)
    (site / "our-cluster.yaml").write_text(text.replace("name: dgx-a100", "name: our-cluster"))
    monkeypatch.setenv(systems.PATH_ENV, str(site))
    assert systems.load("dgx-a100").nics_per_node == 2 and systems.load("our-cluster").name == "our-cluster"
    monkeypatch.delenv(systems.PATH_ENV)
    code, out, _ = _invoke("--systems-dir", str(site), "--list-systems")
    assert code == 0 and "our-cluster" in out and str(site / "dgx-a100.yaml") in out
