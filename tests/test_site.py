"""One ``Site`` value (pins file, stack directories, system directories) instead of process globals:
what ``Site.from_env()`` reads, and requests with different sites in one process each resolving their
own stacks, system models and pins (which module-level lists could not do)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import image_facts, pipeline, sources
from imagekit.util import settings
from imagekit import stack as stack_mod
from imagekit.cli import main
from imagekit.util.errors import ImagekitError, StackError
from imagekit.launch import preflight as pf
from imagekit.launch import targets
from imagekit.launch.session import LaunchRequest, Session
from imagekit.util.settings import Site
from imagekit.validate import GateOptions, Gates
from imagekit.validate import system as systems

ENV = (settings.SITE_ENV, settings.STACKS_PATH_ENV, settings.STACKS_ENV, settings.SYSTEMS_PATH_ENV)
GDRCOPY_STACK = """\
name: gdr
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  cuda: {source: pypi, version: "13.0.2"}
  gdrcopy: {version: "2.5.1"}
"""


@pytest.fixture
def no_site_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def _pins(path: Path, digest: str) -> Path:
    path.write_text(f'pins:\n  gdrcopy: {{"2.5.1": "{digest}"}}\n')
    return path


def _system(directory: Path, nics: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = (systems.SHIPPED_DIR / "dgx-a100.yaml").read_text()
    assert "nics_per_node: 8" in text and "name: dgx-a100" in text
    path = directory / "our-cluster.yaml"
    path.write_text(text.replace("nics_per_node: 8", f"nics_per_node: {nics}").replace("name: dgx-a100",
                                                                                        "name: our-cluster"))
    return path


# -- Site.from_env ---------------------------------------------------------------------------------

def test_from_env_reads_the_variables_it_documents(monkeypatch, tmp_path):
    monkeypatch.setenv("IMAGEKIT_SITE", str(tmp_path / "pins.yaml"))
    monkeypatch.setenv("IMAGEKIT_STACKS_PATH", os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    monkeypatch.setenv("IMAGEKIT_SYSTEMS_PATH", str(tmp_path / "systems"))
    monkeypatch.setenv("IMAGEKIT_STACKS", str(tmp_path / "own-stacks"))
    site = Site.from_env()
    assert site == Site(pins_file=tmp_path / "pins.yaml", stack_dirs=(tmp_path / "a", tmp_path / "b"),
                        system_dirs=(tmp_path / "systems",), shipped_stacks=tmp_path / "own-stacks")
    assert site.stack_search_path() == [tmp_path / "a", tmp_path / "b", tmp_path / "own-stacks"]
    # The command line's values come first: --site wins, --stacks-dir / --systems-dir are searched before.
    flagged = Site.from_env(pins_file="flag.yaml", stack_dirs=["s"], system_dirs=["d"])
    assert flagged.pins_file == Path("flag.yaml")
    assert flagged.stack_dirs == (Path("s"), tmp_path / "a", tmp_path / "b")
    assert flagged.system_dirs == (Path("d"), tmp_path / "systems")
    assert site.with_system_dirs(["d"]).system_dirs == flagged.system_dirs
    # An explicit environment (not the process's) is read the same way.
    assert Site.from_env(environ={"IMAGEKIT_SYSTEMS_PATH": "x"}) == Site(system_dirs=["x"])


def test_from_env_with_nothing_set_is_the_shipped_site(no_site_env):
    site = Site.from_env()
    assert site == Site() and site.pins_file is None and site.stack_dirs == () and site.system_dirs == ()
    assert site.stack_search_path() == [settings.SHIPPED_STACKS_DIR]
    empty = Site.from_env(environ={"IMAGEKIT_SITE": "", "IMAGEKIT_STACKS_PATH": ""})
    assert empty == Site()   # empty variables are unset ones
    with pytest.raises(dataclasses.FrozenInstanceError):
        site.pins_file = Path("x")  # type: ignore[misc]


# -- two sites, one process ------------------------------------------------------------------------

def test_two_sites_in_one_process_find_their_own_stacks_pins_and_systems(tmp_path, no_site_env):
    a, b = tmp_path / "a", tmp_path / "b"
    for directory, note in ((a, "site a"), (b, "site b")):
        directory.mkdir()
        (directory / "ours.yaml").write_text(GDRCOPY_STACK.replace("name: gdr", f"name: ours\ndescription: {note}"))
    site_a = Site(pins_file=_pins(tmp_path / "a-pins.yaml", "aa" * 32), stack_dirs=[a], system_dirs=[a / "sys"])
    site_b = Site(pins_file=_pins(tmp_path / "b-pins.yaml", "bb" * 32), stack_dirs=[b], system_dirs=[b / "sys"])
    _system(a / "sys", nics=2)
    _system(b / "sys", nics=4)
    for _ in range(2):   # interleaved: nothing one lookup does is seen by the next
        one, two = stack_mod.load("ours", site=site_a), stack_mod.load("ours", site=site_b)
        assert (one.description, two.description) == ("site a", "site b")
        assert one.file == str(a / "ours.yaml") and two.file == str(b / "ours.yaml")
        assert one.get("gdrcopy").pin == "aa" * 32 and two.get("gdrcopy").pin == "bb" * 32
        assert str(site_a.pins_file) in one.get("gdrcopy").pin_origin
        assert systems.load("our-cluster", site_a).nics_per_node == 2
        assert systems.load("our-cluster", site_b).nics_per_node == 4
    # Without a site: the environment's, which names none of them.
    assert stack_mod.load(a / "ours.yaml").get("gdrcopy").pin == sources.PINS[("gdrcopy", "2.5.1")]
    with pytest.raises(StackError, match="unknown stack 'ours'"):
        stack_mod.find("ours")
    with pytest.raises(StackError, match="unknown system 'our-cluster'"):
        systems.load("our-cluster")


def test_two_pipeline_requests_resolve_their_own_site(tmp_path, no_site_env):
    """The stack each request names is looked up on its own site; each site's file here is broken
    differently, so build_all stops at it, before any build."""
    a, b = tmp_path / "a", tmp_path / "b"
    for directory in (a, b):
        directory.mkdir()
        (directory / "ours.yaml").write_text(f"name: ours\nfrom_{directory.name}: 1\n")
    seen = {}
    for site, directory in ((Site(stack_dirs=[a]), a), (Site(stack_dirs=[b]), b), (Site(), None)):
        request = pipeline.PipelineRequest("ours", site=site, check_packages=False)
        with pytest.raises(StackError) as err:
            pipeline.build_all(request)
        seen[directory] = err.value
    assert seen[a].file == str(a / "ours.yaml") and "from_a" in str(seen[a])
    assert seen[b].file == str(b / "ours.yaml") and "from_b" in str(seen[b])
    assert "unknown stack 'ours'" in str(seen[None])
    assert pipeline.PipelineRequest("x").site == Site()   # a Python caller's default: the environment's


def test_two_gate_options_load_their_own_system(tmp_path, no_site_env):
    _system(tmp_path / "a", nics=2)
    _system(tmp_path / "b", nics=4)
    one = Gates.load(GateOptions(system="our-cluster", site=Site(system_dirs=[tmp_path / "a"])))
    two = Gates.load(GateOptions(system="our-cluster", site=Site(system_dirs=[tmp_path / "b"])))
    assert (one.system.nics_per_node, two.system.nics_per_node) == (2, 4)
    with pytest.raises(StackError, match="unknown system 'our-cluster'"):
        Gates.load(GateOptions(system="our-cluster"))


CUDA13 = {"io.imagekit.stack": "debian-cuda", "io.imagekit.components": "cuda,nccl",
          "io.imagekit.component.cuda.version": "13.2.2", "io.imagekit.component.cuda.archs": "80,90,100,120",
          "io.imagekit.component.nccl.version": "2.30.7"}


def test_two_launch_requests_preflight_against_their_own_site(tmp_path, monkeypatch, no_site_env):
    """Preflight names the older-GPU stack only where the request's site has it. The host's V100s are
    recorded facts (no GPU exists here): ``HostFacts.probe`` returns them."""
    monkeypatch.setattr(pf.HostFacts, "probe", classmethod(
        lambda cls, **_: cls(driver="580.65.06", gpus=[("Tesla V100-SXM2-32GB", "7.0")] * 8)))
    site = tmp_path / "site"
    site.mkdir()
    (site / "nccl-tests-volta.yaml").write_text("name: nccl-tests-volta\n")
    facts = image_facts.from_labels(CUDA13, ref="img")
    fixes = {}
    # "without": a site whose shipped directory has no Volta stack (a site may ship its own set).
    bare = tmp_path / "shipped"
    bare.mkdir()
    for name, chosen in (("with", Site(stack_dirs=[site])), ("without", Site(shipped_stacks=bare))):
        logs: list[str] = []
        session = Session(LaunchRequest("img", ("true",), site=chosen), log=logs.append, echo=logs.append,
                          facts=facts)
        with pytest.raises(ImagekitError):
            session.preflight(pf.PreflightPlan(needs=targets.of("mpirun").starter.needs))
        fixes[name] = next(line for line in logs if "GPU architecture" in line)
    assert "imagekit build nccl-tests-volta" in fixes["with"]
    assert "nccl-tests-volta" not in fixes["without"] and "CUDA 12 image with sm_70 code" in fixes["without"]


# -- the command line ------------------------------------------------------------------------------

def test_the_group_builds_one_site_per_invocation(tmp_path, no_site_env):
    """--stacks-dir and --site hold for the command they are given to, and not for the next one in
    the same process (they used to stay in module globals until something reset them)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site-mpi.yaml").write_text("name: site-mpi\nextends: debian-mpi\n")
    runner = CliRunner()
    result = runner.invoke(main, ["--stacks-dir", str(site), "stacks", "--json"])
    assert result.exit_code == 0, result.output
    assert {r["stack"]: r["from"] for r in json.loads(result.stdout)}["site-mpi"] == str(site)
    result = runner.invoke(main, ["stacks", "--json"])
    assert result.exit_code == 0 and "site-mpi" not in {r["stack"] for r in json.loads(result.stdout)}

    stack = tmp_path / "gdr.yaml"
    stack.write_text(GDRCOPY_STACK)
    pins = _pins(tmp_path / "pins.yaml", "ab" * 32)
    result = runner.invoke(main, ["--site", str(pins), "render", str(stack)])
    assert result.exit_code == 0 and f"echo '{'ab' * 32}  " in result.stdout, result.output
    result = runner.invoke(main, ["render", str(stack)])
    assert result.exit_code == 0 and "ab" * 32 not in result.stdout
    assert sources.PINS[("gdrcopy", "2.5.1")] in result.stdout


def test_the_site_flag_wins_over_the_environment_and_stack_dirs_come_first(tmp_path, monkeypatch):
    env_pins, flag_pins = _pins(tmp_path / "env.yaml", "ee" * 32), _pins(tmp_path / "flag.yaml", "ff" * 32)
    monkeypatch.setenv("IMAGEKIT_SITE", str(env_pins))
    stack = tmp_path / "gdr.yaml"
    stack.write_text(GDRCOPY_STACK)
    assert "ee" * 32 in CliRunner().invoke(main, ["render", str(stack)]).stdout
    assert "ff" * 32 in CliRunner().invoke(main, ["--site", str(flag_pins), "render", str(stack)]).stdout

    first, later = tmp_path / "first", tmp_path / "later"
    for directory, note in ((first, "flag"), (later, "env")):
        directory.mkdir()
        (directory / "ours.yaml").write_text(GDRCOPY_STACK.replace("name: gdr", f"name: ours\ndescription: {note}"))
    monkeypatch.setenv("IMAGEKIT_STACKS_PATH", str(later))
    result = CliRunner().invoke(main, ["--stacks-dir", str(first), "show", "ours", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["description"] == "flag"
    assert json.loads(CliRunner().invoke(main, ["show", "ours", "--json"]).stdout)["description"] == "env"


# -- a pins file beside the stacks (review 4 E11) --------------------------------------------------

def test_a_pins_file_beside_the_stacks_is_the_sites_pins_and_no_stack(tmp_path, no_site_env):
    """Where a site first puts its pins file: `matrix` exited 2 over it and `stacks` called it BROKEN.
    Now the first stack directory's pins.yaml is the site's pins (unless --site or $IMAGEKIT_SITE names
    one), listed as such; matrix lists only the stacks."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "ours.yaml").write_text(GDRCOPY_STACK.replace("name: gdr", "name: ours"))
    _pins(site_dir / "pins.yaml", "cc" * 32)
    runner = CliRunner()
    listed = runner.invoke(main, ["--stacks-dir", str(site_dir), "matrix", "--json"])
    assert listed.exit_code == 0, listed.output
    stacks = {r["stack"] for r in json.loads(listed.stdout)}
    assert "ours" in stacks and "pins" not in stacks
    rows = json.loads(runner.invoke(main, ["--stacks-dir", str(site_dir), "stacks", "--json"]).stdout)
    (pins_row,) = [r for r in rows if r.get("pins")]
    assert pins_row["in_force"] and not any(r.get("error") for r in rows)
    assert stack_mod.load("ours", site=Site.from_env(stack_dirs=[site_dir])).get("gdrcopy").pin == "cc" * 32
    # Named otherwise, it is listed as not in force, and naming it as a stack says what to do.
    (site_dir / "pins.yaml").rename(site_dir / "site-pins.yaml")
    site = Site.from_env(stack_dirs=[site_dir])
    assert site.pins_file is None and stack_mod.pins_files(site) == [site_dir / "site-pins.yaml"]
    result = runner.invoke(main, ["--stacks-dir", str(site_dir), "render", str(site_dir / "site-pins.yaml")])
    assert result.exit_code == 2
    assert f"{site_dir / 'site-pins.yaml'}: a site pins file, not a stack" in result.output
    assert f"fix: pass it with --site {site_dir / 'site-pins.yaml'}" in result.output
    # --site (and $IMAGEKIT_SITE) win over a pins.yaml beside the stacks.
    _pins(site_dir / "pins.yaml", "dd" * 32)
    assert Site.from_env(pins_file=site_dir / "site-pins.yaml", stack_dirs=[site_dir]).pins_file == \
        site_dir / "site-pins.yaml"
