"""Nothing from an image runs on the host (issue 22, F1): hostile benchmark labels through every
launcher's host-side scripts.

The image's benchmark label (``io.imagekit.benchmark``: a command and an environment) is read back
through the ``.sqsh`` label form (``image_facts.rc_label_lines`` → ``rc_labels``), taken by the CLI's
own ``_job_command`` and rendered into every script a launcher writes for the host: the sbatch
script of each Slurm runtime, ``run.sh`` and ``rank.sh`` of each ``launch mpirun`` runtime, the
inside-out sbatch script, and the MPIJob manifest. Each script then runs with stubs in place of
``srun``, ``mpirun``, ``scontrol``, ``docker``, ``enroot`` and ``apptainer`` that do what the real
ones do with their environment: mpirun and srun start the rank program with theirs (mpirun also
runs an rsh agent when one is set, as plm_rsh does to reach a host), srun under Pyxis starts bash
with the job's environment as Pyxis starts Enroot's scripts, ``enroot`` is a bash script as the
real one is, and a container's environment is recorded from the arguments and variables the real
tool reads it from. The label's variables would run a command on the host if any of them reached
a host shell or tool (``BASH_ENV``, ``PS4`` with ``SHELLOPTS``, ``PATH`` to programs that do it,
``LD_PRELOAD``, ``OMPI_MCA_plm_rsh_agent``): the canary never appears, and every variable reaches
the container with its value, or the job is refused naming the image and the label.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.hostile import CANARY_VAR, nul_free_words
from imagekit import image_facts
from imagekit.util import quoting
from imagekit.util.errors import UsageError
from imagekit.image_facts import reader
from imagekit.launch.starters import Job
from imagekit.launch import inside_out, mpijob, mpirun, runtimes, slurm
from imagekit.launch.session import LaunchRequest, Session
from imagekit.validate import Gates
from helpers.launch_jobs import inside_out_job, mpijob as mpijob_job, mpirun_job, slurm_job
from imagekit.launch.mpirun import HostMpirun
from imagekit.launch.slurm import Srun

# The runtimes whose containers the srun line starts (EDF's are described in a file: tests/launch/test_untrusted_manifests.py).
SCRIPTED = tuple(n for n in runtimes.names(Srun) if not runtimes.of(n).writes_files)

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
BENCH = image_facts.BENCHMARK
EVIL = "@EVIL@"   # replaced by a directory of programs that each create the canary
# Each value runs a command on the host if its variable reaches a host shell or tool.
HOST_CODE = {
    "BASH_ENV": '$(touch "$IK_CANARY")',     # expanded by every non-interactive bash that starts
    "ENV": '$(touch "$IK_CANARY")',          # sh's BASH_ENV
    "PS4": '$(touch "$IK_CANARY")',          # expanded for each traced command ...
    "SHELLOPTS": "xtrace",                   # ... which every bash that starts then traces
    "PATH": EVIL,                            # mpirun, srun, docker, enroot, env, ... from there
    "LD_PRELOAD": f"{EVIL}/ik-canary.so",    # ld.so says "cannot be preloaded" for every program
    "LD_LIBRARY_PATH": EVIL,
    "OMPI_MCA_plm_rsh_agent": f"{EVIL}/agent",
    "OMPI_MCA_orte_rsh_agent": f"{EVIL}/agent",
    "UCX_MODULE_DIR": EVIL,
    "NCCL_NET_PLUGIN": f"{EVIL}/ik-canary.so",
}
TUNING = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "UCX_TLS": "rc,sm", "OMPI_MCA_pml": "ucx",
          "FI_PROVIDER": "efa", "NOTE": "harmless"}
# Text that str.splitlines() would break (F10): a value forging the benchmark label from another label.
SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
EVIL_PROGRAMS = ["mpirun", "srun", "docker", "enroot", "apptainer", "env", "bash", "sh", "cat", "sleep", "mkdir",
                 "mktemp", "mv", "rm", "find", "wc", "id", "hostname", "tail", "touch", "ssh-keygen", "install",
                 "seq", "xargs", "date", "agent"]

# --- stubs ---------------------------------------------------------------------------------------

# Each call leaves a directory: argv (the tool's name, then its arguments) and env, NUL-separated;
# made under a hidden name and renamed, so a call still being recorded is whole or absent.
RECORD = """d=$(mktemp -d "$IK_CALLS/.call.XXXXXX")
printf '%s\\0' "${0##*/}" "$@" > "$d/argv"
env -0 > "$d/env"
mv "$d" "$IK_CALLS/${d##*/.}"
"""
STUBS = {
    # Open MPI's mpirun (C): reaches its hosts with the rsh agent when one is set (plm_rsh splits
    # the value at spaces and runs it, no shell), then starts the rank program with its own
    # environment (the -x names are in it) and the variables Open MPI gives every rank.
    "mpirun": "#!/bin/sh\n" + RECORD + """agent=${OMPI_MCA_plm_rsh_agent:-${OMPI_MCA_orte_rsh_agent:-}}
if [ -n "$agent" ]; then (set -f; $agent localhost true) 2>/dev/null || true; fi
while [ $# -gt 0 ]; do case "$1" in */rank.sh) break ;; *) shift ;; esac; done
export OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1
exec "$@"
""",
    # srun (C) passes the job's environment to the task. Under Pyxis (--container-image) the task is
    # the container: Pyxis runs Enroot's bash scripts with the job's environment less PATH,
    # LD_LIBRARY_PATH and LD_PRELOAD (pyxis_slurmstepd.c), and the command runs in the container.
    "srun": "#!/bin/sh\n" + RECORD + """for a in "$@"; do
  case "$a" in --container-image=*) exec /usr/bin/env -u LD_PRELOAD -u LD_LIBRARY_PATH PATH=/usr/bin:/bin bash -c : ;; esac
done
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
export SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_STEP_TASKS_PER_NODE=1
exec "$@"
""",
    "scontrol": "#!/bin/sh\n" + RECORD + 'printf "%s\\n" node1\n',
    # Go programs: what reaches the container is recorded; the container's command is not run here.
    # `docker exec` works once a container runs (the inside-out script waits for its worker so).
    "docker": "#!/bin/sh\n" + RECORD + """case "$1" in
  run) : > "$IK_CALLS/../docker-running" ;;
  exec) [ -e "$IK_CALLS/../docker-running" ] || exit 1 ;;
esac
""",
    "apptainer": "#!/bin/sh\n" + RECORD,
    # Enroot is bash. `start` runs imagekit's own keeper command (the node container's placeholder,
    # which only writes its pid and waits) so that the ranks find it; `exec` is the rank, in the container.
    "enroot": "#!/bin/bash\n" + RECORD + """if [ "$1" = start ]; then
  shift
  while [ $# -gt 0 ]; do case "$1" in --rc|--env|-e|--mount|-m|--conf|-c) shift 2 ;; -*) shift ;; *) break ;; esac; done
  shift
  exec /usr/bin/env -i PATH=/usr/bin:/bin "$@"
fi
""",
}


def _job_command(facts, image: str) -> tuple[list[str], dict[str, str]]:
    """What `launch … --validate` without a command runs, and the image's environment for it."""
    session = Session(LaunchRequest(image, gates=Gates()), log=print, echo=print, facts=facts)
    return session.command, session.benchmark_env


@pytest.fixture
def stubs(tmp_path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in STUBS.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    return bindir


@pytest.fixture
def evil(tmp_path) -> Path:
    """Programs that create the canary: what a leaked PATH or rsh agent would run."""
    directory = tmp_path / "evil"
    directory.mkdir()
    for name in EVIL_PROGRAMS:
        (directory / name).write_text('#!/bin/sh\n: > "$IK_CANARY"\n')
        (directory / name).chmod(0o755)
    return directory


# --- the label, as an image would carry it -------------------------------------------------------

@st.composite
def benchmarks(draw, pyxis: bool = False) -> tuple[list[str], dict[str, str]]:
    """A label's benchmark: a command and variables, each with a value that runs a command on the host
    if it gets there, or any hostile text. For Pyxis mostly allow-listed names (any other is refused),
    with host code as their values too."""
    allowed = sorted(n for n in TUNING if n != "NOTE")
    pool = st.sampled_from(sorted(HOST_CODE) + sorted(TUNING))
    if pyxis:
        pool = st.one_of(st.sampled_from(allowed), st.sampled_from(allowed), st.sampled_from(allowed), pool)
    names = draw(st.lists(pool, unique=True, max_size=5))
    env = {n: draw(st.one_of(st.just(HOST_CODE.get(n) or TUNING[n]), st.sampled_from(sorted(set(HOST_CODE.values()))),
                             nul_free_words)) for n in names}
    head = draw(st.one_of(st.just("all_reduce_perf"), nul_free_words))
    return [head, *draw(st.lists(nul_free_words, max_size=3))], env


def _labels(command: list[str], env: dict[str, str], forge: str | None) -> dict[str, str]:
    labels = {image_facts.SCHEMA_LABEL: "2", BENCH: json.dumps({"command": command, "env": env})}
    if forge is not None:
        # Sorted after the real label: a reader that splits at `forge` would take this benchmark.
        labels["zz.vendor.note"] = f"harmless{forge}# {BENCH} " + json.dumps(
            {"command": ["sh", "-c", 'touch "$IK_CANARY"'], "env": {"BASH_ENV": HOST_CODE["BASH_ENV"]}})
    return labels


def _through_sqsh(labels: dict[str, str], image: str):
    """The labels as an exported .sqsh keeps them (F10) and imagekit reads them back."""
    text = image_facts.rc_label_lines(labels, f"image {image}")
    assert image_facts.rc_labels(text) == labels
    return image_facts.from_labels(image_facts.rc_labels(text), ref=image)


def _swap_evil(bench: tuple[list[str], dict[str, str]], evil: Path) -> tuple[list[str], dict[str, str]]:
    command, env = bench
    return ([w.replace(EVIL, str(evil)) for w in command], {k: v.replace(EVIL, str(evil)) for k, v in env.items()})


# --- running and reading back --------------------------------------------------------------------

def _run(script: Path, stubs: Path, work: Path, **env) -> list[tuple[str, list[bytes], dict[bytes, bytes]]]:
    """Run ``script`` with the stubs first on PATH; every recorded call (tool, argv, env), in order."""
    calls = work / "calls"
    calls.mkdir()
    canary = work / "canary"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    proc = subprocess.run(["bash", str(script)], capture_output=True, timeout=120, cwd=work,
                          env={"PATH": f"{stubs}:/usr/bin:/bin", "IK_CALLS": str(calls), CANARY_VAR: str(canary),
                               "HOME": str(work), **env})
    err = proc.stderr.decode(errors="replace")
    assert not canary.exists(), "a value from the image ran on the host:\n" + err
    assert "cannot be preloaded" not in err, "the image's LD_PRELOAD reached a host program:\n" + err
    assert proc.returncode == 0, err
    out = []
    for d in sorted(calls.glob("call.*"), key=lambda p: p.stat().st_mtime_ns):
        argv = (d / "argv").read_bytes().split(b"\0")[:-1]
        env_ = dict(e.split(b"=", 1) for e in (d / "env").read_bytes().split(b"\0")[:-1] if b"=" in e)
        out.append((argv[0].decode(), argv[1:], env_))
    return out


def _pairs(argv: list[bytes], flags: tuple[bytes, ...], env: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """``FLAG NAME=VALUE`` / ``FLAG NAME`` (the tool's own value) arguments, in order, later ones winning."""
    out: dict[bytes, bytes] = {}
    i = 0
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv):
            name, sep, value = argv[i + 1].partition(b"=")
            if sep or name in env:
                out[name] = value if sep else env[name]
            i += 2
        else:
            i += 1
    return out


def _container(call) -> dict[bytes, bytes] | None:
    """The environment the real tool gives the container for this call, or None (no container)."""
    tool, argv, env = call
    if tool == "docker" and argv[:1] == [b"run"]:
        return _pairs(argv, (b"-e", b"--env"), env)
    if tool == "enroot" and argv[:1] == [b"exec"]:
        return _pairs(argv, (b"-e", b"--env"), env)
    if tool == "apptainer" and argv[:1] == [b"exec"]:
        # Host variables pass through; APPTAINERENV_NAME sets NAME (and wins).
        out = {k: v for k, v in env.items() if not k.startswith((b"APPTAINER", b"SINGULARITY"))}
        out.update({k[len(b"APPTAINERENV_"):]: v for k, v in env.items() if k.startswith(b"APPTAINERENV_")})
        return out
    if tool == "srun" and any(a.startswith(b"--container-image=") for a in argv):
        names = [a.split(b"=", 1)[1].split(b",") for a in argv if a.startswith(b"--container-env=")]
        return {n: env[n] for n in (names[0] if names else []) if n in env}
    return None


def _expect(image_env: dict[str, str], user_env: dict[str, str]) -> dict[bytes, bytes]:
    return {quoting.encode(k): quoting.encode(v) for k, v in {**image_env, **user_env}.items()}


def _reached(calls, expected: dict[bytes, bytes], command: list[str]) -> None:
    """Some container got every variable with its value, and the label's command word for word."""
    containers = [(c, _container(c)) for c in calls]
    containers = [(c, env) for c, env in containers if env is not None]
    assert containers, [c[:2] for c in calls]
    words = [quoting.encode(w) for w in command]
    for (tool, argv, _), env in containers:
        if argv[-len(words):] == words:
            assert {k: env.get(k) for k in expected} == expected, (tool, argv)
            return
    raise AssertionError(f"no container ran {command!r}: {[c[:2] for c in calls]}")


def _job_or_refusal(make, command, env, image: str, forge):
    """The job the CLI would make from the label, or None after checking the refusal names the image
    and the label."""
    facts = _through_sqsh(_labels(command, env, forge), image)
    assert facts.benchmark == image_facts.Benchmark(command, env), "another label changed the benchmark"
    try:
        cmd, image_env = _job_command(facts, image)
        return make(cmd, image_env)
    except UsageError as exc:
        assert exc.message.startswith(f"image {image}: label {BENCH} "), exc.message
        assert "\n" not in exc.message
        event("refused")
        return None


USER_ENV = st.one_of(st.just({}), st.just({"NCCL_DEBUG": "WARN"}))
FORGE = st.one_of(st.none(), st.sampled_from(SEPARATORS))


def _image(work: Path) -> str:
    path = work / "bench.sqsh"   # a file (the enroot runtime checks it can read it); the stubs never open it
    path.write_bytes(b"")
    return str(path)


# --- the launchers -------------------------------------------------------------------------------

@PROPERTY
@given(data=st.data(), user_env=USER_ENV, forge=FORGE)
@pytest.mark.parametrize("runtime", SCRIPTED)
def test_sbatch_scripts_keep_the_image_env_in_the_containers(tmp_path, stubs, evil, runtime, data, user_env, forge):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    command, env = _swap_evil(data.draw(benchmarks(pyxis=runtime == "pyxis"), label="bench"), evil)
    image = _image(work)
    job = _job_or_refusal(lambda cmd, image_env: slurm_job(image=image, nodes=1, command=cmd, runtime=runtime,
                                                                env=user_env, image_env=image_env),
                          command, env, image, forge)
    if job is None:
        assert runtime == "pyxis" or any(quoting.CONTROL.search(v) for v in env.values()) or \
            command[0].startswith("-")
        return
    event("ran")
    script = work / "job.sbatch"
    script.write_bytes(quoting.encode(slurm.render(job)))
    calls = _run(script, stubs, work, SLURM_JOB_ID="42", SLURM_JOB_NUM_NODES="1")
    _reached(calls, _expect(job.workload.image_env, user_env), command)


@PROPERTY
@given(bench=benchmarks(), user_env=USER_ENV, forge=FORGE)
@pytest.mark.parametrize("runtime", runtimes.names(HostMpirun))
def test_mpirun_scripts_keep_the_image_env_in_the_containers(tmp_path, stubs, evil, runtime, bench, user_env, forge):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    command, env = _swap_evil(bench, evil)
    image = _image(work)
    job = _job_or_refusal(lambda cmd, image_env: mpirun_job(runtime=runtime, image=image, hosts=[("h1", 1)],
                                                                  command=cmd, env=user_env, image_env=image_env),
                          command, env, image, forge)
    if job is None:
        return
    event("ran")
    run_sh = mpirun.write(job, work / "job")
    # Neither holds an image variable as a variable (the user's own --env of the same name is theirs).
    image_only = [k for k in job.workload.image_env if k not in user_env]
    for name in ("run.sh", "rank.sh"):
        text = (work / "job" / name).read_text(errors="surrogateescape")
        assert not any(line.startswith(f"export {k}=") for k in image_only for line in text.splitlines())
    calls = _run(run_sh, stubs, work)
    _reached(calls, _expect(job.workload.image_env, user_env), command)


@PROPERTY
@given(bench=benchmarks(), user_env=USER_ENV, forge=FORGE)
def test_inside_out_sbatch_keeps_the_image_env_in_the_containers(tmp_path, stubs, evil, bench, user_env, forge):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    command, env = _swap_evil(bench, evil)
    image = _image(work)
    job = _job_or_refusal(lambda cmd, image_env: inside_out_job(image=image, nodes=1, command=cmd,
                                                                         scheduler="slurm", env=user_env,
                                                                         image_env=image_env),
                          command, env, image, forge)
    if job is None:
        return
    event("ran")
    script = work / "io.sbatch"
    script.write_bytes(quoting.encode(inside_out.render_sbatch(job)))
    calls = _run(script, stubs, work, SLURM_JOB_ID="42", SLURM_SUBMIT_DIR=str(work), SLURM_JOB_NUM_NODES="1",
                 SLURM_JOB_NODELIST="node1")
    run = next(c for c in calls if c[0] == "docker" and c[1][:1] == [b"run"])
    assert {k: _container(run).get(k) for k in _expect(job.workload.image_env, user_env)} == _expect(job.workload.image_env, user_env)
    mpi = next(c for c in calls if c[0] == "docker" and c[1][:1] == [b"exec"] and b"mpirun" in c[1])
    assert mpi[1][-len(command):] == [quoting.encode(w) for w in command]   # mpirun runs in the container
    # The worker files are fixed text: no value reaches them.
    d = inside_out.make_job_dir(job, work)
    assert (d / "start.sh").read_text() == inside_out.START_SH
    assert (d / "ssh_config").read_text() == inside_out.SSH_CONFIG


@PROPERTY
@given(bench=benchmarks(), user_env=USER_ENV, forge=FORGE)
def test_mpijob_manifest_puts_the_image_env_in_the_pods_only(tmp_path, evil, bench, user_env, forge):
    command, env = _swap_evil(bench, evil)
    spec = _job_or_refusal(lambda cmd, image_env: mpijob_job(name="job", image="reg/img:1", workers=2,
                                                                    command=cmd, env=user_env, image_env=image_env),
                           command, env, "reg/img:1", forge)
    if spec is None:
        return
    loaded = yaml.safe_load(mpijob.render(spec))
    assert loaded == mpijob.build(spec)
    expected = {**spec.workload.image_env, **user_env}
    for role in ("Launcher", "Worker"):
        container = loaded["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        got = {e["name"]: e["value"] for e in container.get("env", [])}
        assert {k: got.get(k) for k in expected} == expected
    launcher = loaded["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    # mpirun (in the launcher pod) is told the names; the values are in the pods' env only.
    argv = launcher["command"][launcher["command"].index("imagekit-launcher") + 1:]
    assert argv == ["mpirun", "-np", "2", "--allow-run-as-root", *[a for k in expected for a in ("-x", k)], *command]


# --- the allow-list, by example ------------------------------------------------------------------

@pytest.mark.parametrize("name,allowed", [
    ("NCCL_DEBUG", True), ("NCCL_IB_HCA", True), ("UCX_TLS", True), ("OMPI_MCA_pml", True), ("FI_PROVIDER", True),
    ("OMPI_MCA_btl_tcp_if_include", True), ("SHARP_COLL_ENABLE_SAT", True),
    ("BASH_ENV", False), ("ENV", False), ("PS4", False), ("SHELLOPTS", False), ("PATH", False), ("LD_PRELOAD", False),
    ("LD_LIBRARY_PATH", False), ("PYTHONPATH", False), ("ENROOT_CONFIG_PATH", False), ("PMIX_MCA_gds", False),
    ("SLURM_CONF", False), ("NVIDIA_VISIBLE_DEVICES", False), ("CUDA_VISIBLE_DEVICES", False),
    ("OMPI_MCA_plm_rsh_agent", False), ("OMPI_MCA_orte_rsh_agent", False), ("OMPI_MCA_orte_launch_agent", False),
    ("OMPI_MCA_plm_rsh_args", False), ("OMPI_MCA_mca_base_component_path", False),
    ("OMPI_MCA_mca_base_param_files", False), ("UCX_MODULE_DIR", False), ("UCX_GDB_COMMAND", False),
    ("UCX_LOG_FILE", False), ("NCCL_NET_PLUGIN", False), ("NCCL_TOPO_FILE", False), ("FI_PROVIDER_PATH", False),
])
def test_pyxis_takes_only_allow_listed_names_from_an_image(name, allowed):
    """Pyxis hands a container its variables through the job's environment on the host: an image's
    variable goes there only when its name is allow-listed; else the job is refused, naming the image,
    the label and the variable, before anything is written."""
    def job(runtime: str) -> Job:
        return slurm_job(image="./b.sqsh", nodes=1, command=["x"], runtime=runtime, image_env={name: "v"})

    if allowed:
        assert f"export {name}=v" in slurm.render(job("pyxis"))
    else:
        with pytest.raises(quoting.UnsafeValue, match=rf"^image \./b\.sqsh: label {BENCH} env name '{name}' "):
            job("pyxis")
    for runtime in ("enroot", "apptainer", "docker"):   # given to the container as a value: any name
        assert f"export {name}=" not in slurm.render(job(runtime))


def test_a_user_env_wins_over_the_image_env():
    job = mpirun_job(runtime="docker", image="img", hosts=[("h", 1)], command=["x"],
                           env={"NCCL_DEBUG": "WARN"}, image_env={"NCCL_DEBUG": "INFO", "NOTE": "a b"})
    wrapper = mpirun.render_wrapper(job)
    assert "forward+=(-e NCCL_DEBUG)" in wrapper and "'NOTE=a b'" in wrapper and "NCCL_DEBUG=INFO" not in wrapper
    assert "export NOTE" not in mpirun.render_run(job) and "-x NOTE" not in mpirun.render_run(job)


@pytest.mark.parametrize("bench,field", [
    ({"command": ["-a", "x"], "env": {}}, r"command\[0\] '-a' starts with '-'"),
    ({"command": ["x"], "env": {"A": "1\n2"}}, "env A '1\\\\n2' contains the control character"),
    ({"command": ["x"], "env": {"A B": "1"}}, "env name 'A B' is not a valid variable name"),
])
def test_a_bad_label_benchmark_is_refused_naming_the_image_and_the_label(bench, field, tmp_path):
    facts = image_facts.from_labels({image_facts.SCHEMA_LABEL: "2", BENCH: json.dumps(bench)}, ref="site/img:1")
    with pytest.raises(UsageError, match=rf"^image site/img:1: label {BENCH} {field}"):
        cmd, image_env = _job_command(facts, "site/img:1")
        mpirun_job(runtime="enroot", image="site/img:1", hosts=[("h", 1)], command=cmd, image_env=image_env)


def test_launch_mpirun_validate_writes_no_image_value_into_run_sh(tmp_path, monkeypatch):
    """The CLI end to end (F1's reproducer): `launch mpirun --validate` without a command, the
    benchmark from the image's label; the scripts it writes hold the label's variables only as the
    container's arguments."""
    from click.testing import CliRunner

    from imagekit.cli import main

    bench = {"command": ["all_reduce_perf", "-b", "8"],
             "env": {"NCCL_DEBUG": "INFO", "BASH_ENV": "$(id > /tmp/PWNED-on-host; echo /dev/null)"}}
    facts = image_facts.from_labels({image_facts.SCHEMA_LABEL: "2", BENCH: json.dumps(bench)}, ref="./b.sqsh")
    monkeypatch.setattr(reader, "read_or_reason", lambda image: facts)
    out = tmp_path / "job"
    res = CliRunner().invoke(main, ["launch", "mpirun", "--runtime", "enroot", "--image", "./b.sqsh", "--hosts",
                                    "localhost:1", "--validate", "--no-preflight", "-o", str(out)])
    assert res.exit_code == 0, res.output
    run_sh, rank_sh = (out / "run.sh").read_text(), (out / "rank.sh").read_text()
    assert "BASH_ENV" not in run_sh and "NCCL_DEBUG" not in run_sh
    assert "forward+=(--env 'BASH_ENV=$(id > /tmp/PWNED-on-host; echo /dev/null)')" in rank_sh
    assert "forward+=(--env NCCL_DEBUG=INFO)" in rank_sh or "forward+=(--env 'NCCL_DEBUG=INFO')" in rank_sh
    assert '"$here/rank.sh" all_reduce_perf -b 8' in run_sh
