"""The container runtimes as classes (launch/runtimes.py): each answers every question, a new one is one
class and its row, and RUNTIMES is the only list of their names. What the scripts do under each runtime
is tested for real in test_slurm.py, test_mpirun.py and test_enroot_runtime.py; here, the interface."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit import image_facts
from imagekit.cli import launch_cmds, main  # noqa: F401 (launch_cmds: its options exist before a test adds a runtime)
from imagekit.util.errors import UsageError
from helpers.launch_jobs import mpirun_job, slurm_job
from imagekit.launch import mpirun, preflight, runtimes, slurm, targets
from imagekit.launch.common import parse_mounts
from imagekit.launch.gpu_env import GpuLaunch
from imagekit.launch.mpirun import HostMpirun
from imagekit.launch.runtimes import GpuVerdict, RankStart, Runtime, SrunStep
from imagekit.launch.schedulers import write_outputs
from imagekit.launch.slurm import Srun
from imagekit.launch.workload import Workload

SRC = Path(runtimes.__file__).resolve().parents[1]
WORKLOAD = Workload(image="site/img:1", command=["./app", "a b"], job_id="ik0001",
                    mounts=parse_mounts(["/data:/data:ro"]),
                    env={"FOO": "1"}, image_env={"NCCL_ALGO": "Ring"}, workdir="/work")
START = RankStart(workload=WORKLOAD, env_names=["FOO"], pass_gpus=True)


@pytest.mark.parametrize("name", runtimes.RUNTIMES)
def test_every_runtime_answers_every_question(name):
    rt = runtimes.of(name)
    assert isinstance(rt, Runtime) and rt.name == name
    assert any(t.starter.accepts(rt) for t in targets.TARGETS)
    for flag in ("gpu_hook", "fstab_mounts", "host_env", "engine", "stages", "rank_wrapper_kind"):
        assert isinstance(getattr(rt, flag), bool), flag
    assert isinstance(rt.shm_note, str) and (rt.gpu_fix is None or "NVIDIA_VISIBLE_DEVICES=void" in rt.gpu_fix)
    # The sbatch step: every runtime runs under Slurm, and its srun line ends with the command.
    files = {name: f"/jobs/{name}" for name in rt.files(WORKLOAD)}
    assert bool(files) is rt.writes_files
    lines = rt.srun_lines(SrunStep(rank=START, srun=["srun", "--mpi=pmix"], files=files))
    assert lines[-1].startswith("srun --mpi=pmix") and lines[-1].endswith("./app 'a b'"), lines[-1]
    assert all(isinstance(line, str) for line in rt.sbatch_cleanup() + rt.run_cleanup("docker"))
    # The rank wrapper: the runtimes host mpirun can use have one; the others say which runtimes do.
    if HostMpirun.accepts(rt):
        text = rt.rank_wrapper(START)
        assert text.startswith("#!/bin/bash\n") and f"({name}, job ik0001)" in text and "NCCL_ALGO=Ring" in text
    else:
        with pytest.raises(UsageError, match=f"the {name} runtime has no rank wrapper") as err:
            rt.rank_wrapper(START)
        assert ", ".join(runtimes.names(HostMpirun)) in err.value.hint
    # The GPU runtime: a verdict of its own, or the NVIDIA hook's rule (None) -- never both kinds of runtime.
    for gpus in (False, True):
        verdict = rt.gpu_verdict(gpus, None, "this host has no NVIDIA driver")
        assert verdict is None or isinstance(verdict, GpuVerdict)
    cuda = {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert rt.cpu_only_env({}, cuda) == ({"NVIDIA_VISIBLE_DEVICES": "void"} if rt.gpu_hook else {})


@pytest.mark.parametrize("name", runtimes.names(Srun))
def test_every_slurm_runtime_renders_a_script_that_names_it(name):
    script = slurm.render(slurm_job(image="reg#img:1", nodes=1, command=["./app"], runtime=name))
    assert f"({name} runtime)" in script and script.rstrip().splitlines()[-1].endswith("./app")


def test_fstab_runtimes_refuse_mounts_with_whitespace():
    mounts = parse_mounts(["/a b:/c"])
    for name in runtimes.RUNTIMES:
        rt = runtimes.of(name)
        if rt.fstab_mounts:
            with pytest.raises(UsageError, match=f"which {name} mounts cannot carry"):
                rt.check_mounts(mounts)
        else:
            rt.check_mounts(mounts)


def test_of_names_the_valid_runtimes():
    with pytest.raises(UsageError, match="unknown runtime 'lxc'") as err:
        runtimes.of("lxc")
    assert err.value.hint == "use one of: " + ", ".join(runtimes.RUNTIMES)
    with pytest.raises(UsageError, match="cannot start the containers of `imagekit launch mpirun`") as err:
        runtimes.of("pyxis", HostMpirun, "mpirun")
    assert err.value.hint == "use one of: " + ", ".join(runtimes.names(HostMpirun))
    assert runtimes.of("docker", targets.of("inside-out").starter).name == "docker"


def test_a_sif_implies_apptainer_and_nothing_else_implies_one():
    assert runtimes.implied_by("./mpi.sif").name == "apptainer"
    assert runtimes.implied_by("./mpi.sqsh") is None and runtimes.implied_by("reg/img:1") is None


class ChRun(Runtime):
    """A made-up runtime (``ch-run IMAGE -- CMD``): what adding one takes, and nothing else."""

    name = "chrun"

    def wrapper_body(self, start: RankStart) -> str:
        return ('exec ch-run "$image" -- "$@"\n')


@pytest.fixture
def chrun(monkeypatch):
    """ChRun in the table, as its row in runtimes._ALL would put it (undone after the test)."""
    rt = ChRun()
    monkeypatch.setattr(runtimes, "_ALL", runtimes._ALL + (rt,))
    monkeypatch.setattr(runtimes, "_BY_NAME", {**runtimes._BY_NAME, rt.name: rt})
    monkeypatch.setattr(runtimes, "RUNTIMES", runtimes.RUNTIMES + (rt.name,))
    return rt


def test_a_new_runtime_is_one_class(chrun, shellcheck, tmp_path):
    """The jobs, the scripts, the GPU environment and preflight take it with no other change."""
    assert "chrun" in runtimes.names(Srun) and "chrun" in runtimes.names(HostMpirun)
    wrapper = chrun.rank_wrapper(START)
    assert wrapper.startswith("#!/bin/bash\n# imagekit rank wrapper (chrun, job ik0001)")
    assert wrapper.endswith('exec ch-run "$image" -- "$@"\n')
    job = slurm_job(image="./img.tar", nodes=2, command=["./app"], runtime="chrun")
    script = slurm.render(job)
    assert "(chrun runtime)" in script and 'bash -c "$rank_wrapper" imagekit-rank ./app' in script
    shellcheck(write_outputs(job.starter.files(job), tmp_path / "job.sbatch")[0])
    job = mpirun_job(runtime="chrun", image="./img.tar", hosts=[("a", 2)], command=["./app"])
    run_sh = mpirun.write(job, tmp_path / "mpirun")
    shellcheck(run_sh)
    shellcheck(tmp_path / "mpirun" / "rank.sh")
    assert "exec ch-run" in (tmp_path / "mpirun" / "rank.sh").read_text()
    res = CliRunner().invoke(main, ["launch", "slurm", "--runtime", "chrun", "--image", "./img.tar", "-N", "1",
                                    "--no-preflight", "--", "./app"])
    assert res.exit_code == 0 and "(chrun runtime)" in res.output, res.output
    # It reads no NVIDIA_VISIBLE_DEVICES (gpu_hook False) and has no verdict of its own: preflight judges
    # the image's variable, as for a runtime it does not know.
    facts = image_facts.from_labels({"io.imagekit.stack": "x"}, ref="./img.tar", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    finding = preflight.check_gpu_runtime(facts, preflight.HostFacts(), GpuLaunch(runtime=chrun, here=True))
    assert finding.status == "fail" and "Pyxis:" in finding.fix and "Enroot:" in finding.fix


@pytest.mark.parametrize("target", [t for t in targets.TARGETS if t.default_runtime], ids=lambda t: t.name)
def test_the_cli_takes_its_runtimes_from_the_one_tuple(target):
    """Each `imagekit launch` command offers the runtimes its rank starter accepts, in RUNTIMES order."""
    cmd = main.get_command(None, "launch").get_command(None, target.name)
    option = next(p for p in cmd.params if p.name == "runtime")
    assert option.metavar == "|".join(runtimes.names(target.starter))
    assert set(runtimes.names(target.starter)) <= set(runtimes.RUNTIMES)
    assert option.default in runtimes.names(target.starter)
    assert runtimes.names(Srun) == runtimes.RUNTIMES


def test_no_module_tests_a_runtimes_name_or_lists_them():
    """The runtime's name is resolved once (runtimes.of); nothing else in the package compares it, and no
    other tuple spells out runtime names (checks/runtimes.py's runners, which run an image file's
    checks, are rows too)."""
    name_test = re.compile(r"\b(runtime|\.runtime)\s*(==|!=|in \(|not in \()")
    names = "|".join(runtimes.RUNTIMES)
    name_tuple = re.compile(rf'\(\s*"({names})"\s*,\s*"({names})"')
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == Path(runtimes.__file__).resolve():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if name_test.search(line) or name_tuple.search(line):
                found.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
    # The scan can fail: the line this module replaced is found.
    assert name_test.search('    if runtime == "docker":') and name_tuple.search('RUNTIMES = ("docker", "apptainer")')
