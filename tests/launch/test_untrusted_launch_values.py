"""Hostile launch values in every launch script and manifest: sbatch files (outside-in, all four
runtimes, and inside-out), the rank wrapper, run.sh, the inside-out ssh config and hostfile, and
the MPIJob manifest.

Each generated script is parsed (``bash -n``) and then run for real, with stubs in place of
``srun``, ``mpirun``, ``scontrol``, ``docker``, ``enroot`` and ``apptainer`` (Slurm and the
container runtimes are exercised for real elsewhere; here the question is only what reaches
them). A stub records the argument vector it was given, byte for byte, and ``srun``/``mpirun``
stubs go on to run the command they would start (the rank wrapper), so the whole chain runs.
Every payload would create ``$IK_CANARY`` if any part of it ran as code.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.hostile import CANARY_VAR, nul_free_lists, nul_free_words, words
from imagekit.util import quoting
from imagekit.util.errors import UsageError
from imagekit.launch import inside_out, mpijob, mpirun, runtimes, slurm
from imagekit.launch.common import Mount
from helpers.launch_jobs import inside_out_job, mpijob as mpijob_job, mpirun_job, slurm_job
from imagekit.launch.mpirun import HostMpirun
from imagekit.launch.slurm import Srun

# The runtimes whose containers the srun line starts (EDF's are described in a file: tests/launch/test_untrusted_manifests.py).
SCRIPTED = tuple(n for n in runtimes.names(Srun) if not runtimes.of(n).writes_files)

PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
commands = st.builds(lambda head, rest: [head, *rest], nul_free_words.filter(lambda w: not w.startswith("-")),
                     nul_free_lists)
def _or(default: str):
    """Half the time a plain value, so that the other fields' hostile values get to run."""
    return st.one_of(st.just(default), words)


env_values = st.dictionaries(st.sampled_from(["A", "NOTE", "NCCL_DEBUG", "UCX_TLS"]), nul_free_words, max_size=3)

# Written under a hidden name, then renamed: a call that a backgrounded step is still recording
# when the script ends is then either whole or absent, never an empty file.
RECORD = """#!/bin/sh
f=$(mktemp "$IK_CALLS/.call.XXXXXX")
printf '%s\\0' "${0##*/}" "$@" > "$f"
mv "$f" "$IK_CALLS/${f##*/.}"
"""
# srun/mpirun: record, then skip their own options and run what they would start on each node.
LAUNCHER = RECORD + """case "${0##*/}" in
  srun) while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done ;;
  mpirun) while [ $# -gt 0 ]; do case "$1" in */rank.sh) break ;; *) shift ;; esac; done ;;
esac
case "${1:-}" in bash|sh|*/rank.sh) exec "$@" ;; esac
"""
SCONTROL = RECORD + 'printf "%s\\n" node1 node2\n'
# enroot: record; `start` goes on to run the command it was given, as the real one does in the
# container: the rank wrapper's node "keeper", which the node's ranks then `enroot exec` into.
ENROOT = RECORD + """[ "$1" = start ] || exit 0
shift
while [ $# -gt 0 ]; do case "$1" in --rc|--env|--mount|-e|-m|-c|--conf) shift 2 ;; -*) shift ;; *) break ;; esac; done
shift
exec "$@"
"""


@pytest.fixture
def stubs(tmp_path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("srun", LAUNCHER), ("mpirun", LAUNCHER), ("scontrol", SCONTROL),
                       ("docker", RECORD), ("enroot", ENROOT), ("apptainer", RECORD)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    return bindir


def _run(script: Path, stubs: Path, refused: str = "", **env) -> list[list[bytes]]:
    """Run ``script`` with the stubs first on PATH; return the recorded calls (argv lists). With
    ``refused``, the script must stop with that message instead."""
    work = script.parent
    calls = work / "calls"
    calls.mkdir(exist_ok=True)
    for old in calls.iterdir():
        old.unlink()
    canary = work / "canary"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(["bash", str(script)], capture_output=True, timeout=60, cwd=work,
                          env={"PATH": f"{stubs}:/usr/bin:/bin", "IK_CALLS": str(calls),
                               CANARY_VAR: str(canary), "HOME": str(work), **env})
    assert not canary.exists(), "an injected command ran"
    if refused:
        assert proc.returncode != 0 and refused.encode() in proc.stderr, proc.stderr
        return []
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [c.read_bytes().split(b"\0")[:-1] for c in sorted(calls.glob("call.*"), key=os.path.getmtime)]


def _enroot_image(image: str, work: Path) -> str:
    """The enroot runtime starts a squashfs file or a named container: the plain default stands for
    a file that exists (an empty one: `enroot create` is a stub here)."""
    if image == "site/img:1":
        (work / "img.sqsh").touch()
        return str(work / "img.sqsh")
    return image


def _enroot_refusal(image: str, work: Path) -> str:
    """The wrapper's own refusal, where it must give one: a path it cannot read."""
    path_like = "/" in image or image.endswith(".sqsh")
    return "cannot read the image" if path_like and not os.access(work / image, os.R_OK) else ""


def _started(calls: list[list[bytes]], runtime: str, image: str) -> list[bytes]:
    """The call that starts the rank's command in a container. Under enroot that is the node's
    `enroot exec` into the keeper, which `enroot start` (or `create`, for a file) was given the image."""
    if runtime != "enroot":
        return next(c for c in calls if c[0] == runtime.encode() and c[1] in (b"run", b"start", b"exec"))
    given = ([c for c in calls if c[0] == b"enroot" and c[1] == b"create"]
             or [c for c in calls if c[0] == b"enroot" and c[1] == b"start"])
    assert quoting.encode(image) in given[0], given
    return next(c for c in calls if c[0] == b"enroot" and c[1] == b"exec")


def _enc(words_: list[str]) -> list[bytes]:
    return [quoting.encode(w) for w in words_]


def _write(path: Path, text: str) -> Path:
    path.write_bytes(quoting.encode(text))
    return path


@PROPERTY
@given(command=commands, env=env_values, workdir=_or("work"), image=_or("site/img:1"), name=_or("imagekit"),
       runtime=st.sampled_from(SCRIPTED))
def test_sbatch_script_passes_every_value_intact(tmp_path, stubs, command, env, workdir, image, name, runtime):
    try:
        image = "site/img:1" if image.startswith("-") else image
        job = slurm_job(image=_enroot_image(image, tmp_path) if runtime == "enroot" else image, nodes=2,
                             command=command, runtime=runtime, env=env, workdir="/" + workdir,
                             job_name=name, mounts=[Mount("/data", "/data", True)])
    except UsageError as exc:
        assert "\n" not in exc.message
        event("refused")
        return
    event("ran")
    refused = _enroot_refusal(job.workload.image, tmp_path) if runtime == "enroot" else ""
    calls = _run(_write(tmp_path / "job.sbatch", slurm.render(job)), stubs, refused, SLURM_JOB_ID="42",
                 SLURM_JOB_NUM_NODES="2")
    if refused:
        return
    srun = next(c for c in calls if c[0] == b"srun" and b"--mpi=pmix" in c)
    if runtime == "pyxis":
        assert srun[-len(command):] == _enc(command)
        assert quoting.encode(f"--container-image={job.workload.image}") in srun
        assert quoting.encode(f"--container-workdir={job.workload.workdir}") in srun
        return
    started = _started(calls, runtime, job.workload.image)
    if runtime == "enroot":  # no workdir flag: sh -c 'cd "$0" && exec "$@"' WORKDIR CMD...
        assert started[-len(command) - 1:] == _enc([job.workload.workdir, *command])
    else:
        assert started[-len(command) - 1:] == _enc([job.workload.image, *command])
    for k, v in env.items():
        flag = {"docker": b"-e", "enroot": b"--env"}.get(runtime)
        if flag:
            assert quoting.encode(k) in started


@PROPERTY
@given(command=commands, env=env_values, image=_or("site/img:1"), runtime=st.sampled_from(runtimes.names(HostMpirun)))
def test_mpirun_scripts_pass_every_value_intact(tmp_path, stubs, command, env, image, runtime):
    try:
        (tmp_path / "job").mkdir(exist_ok=True)
        image = _enroot_image(image, tmp_path / "job") if runtime == "enroot" else image
        job = mpirun_job(runtime=runtime, image=image or "x", hosts=[("h1", 2)], command=command, env=env)
    except UsageError as exc:
        assert "\n" not in exc.message
        event("refused")
        return
    event("ran")
    run_sh = mpirun.write(job, tmp_path / "job")
    refused = _enroot_refusal(job.workload.image, run_sh.parent) if runtime == "enroot" else ""
    calls = _run(run_sh, stubs, refused)
    if refused:
        return
    launched = next(c for c in calls if c[0] == b"mpirun")
    assert launched[-len(command):] == _enc(command)
    started = _started(calls, runtime, job.workload.image)
    if runtime == "enroot":  # exec'd by the keeper's pid; the image went to create/start
        assert started[-len(command):] == _enc(command)
    else:
        assert started[-len(command) - 1:] == _enc([job.workload.image, *command])


@PROPERTY
@given(command=commands, env=env_values, image=_or("site/img:1"), name=_or("imagekit-io"), args=nul_free_lists)
def test_inside_out_sbatch_passes_every_value_intact(tmp_path, stubs, command, env, image, name, args):
    try:
        job = inside_out_job(image=image or "x", nodes=2, command=command, env=env, scheduler="slurm",
                                      job_name=name, mpirun_args=args)
    except UsageError as exc:
        assert "\n" not in exc.message
        event("refused")
        return
    event("ran")
    calls = _run(_write(tmp_path / "io.sbatch", inside_out.render_sbatch(job)), stubs,
                 SLURM_JOB_ID="42", SLURM_SUBMIT_DIR=str(tmp_path), SLURM_JOB_NUM_NODES="2",
                 SLURM_JOB_NODELIST="node[1-2]")
    srun = next(c for c in calls if c[0] == b"srun" and b"docker" in c and b"--entrypoint" in c)
    run = srun[srun.index(b"docker"):]  # what srun starts on every node
    assert run[run.index(b"--entrypoint") + 2] == quoting.encode(job.workload.image)
    mpi = next(c for c in calls if c[0] == b"docker" and c[1] == b"exec" and b"mpirun" in c)
    assert mpi[-len(command):] == _enc(command)
    assert mpi[mpi.index(b"mpirun"):][-len(command) - len(args):-len(command) or None] == _enc(args)
    for k, v in env.items():
        assert quoting.encode(f"{k}={v}") in run


@PROPERTY
@given(command=commands, env=env_values)
def test_inside_out_ssh_config_and_hostfile_are_fixed_text(command, env):
    """No job value reaches the ssh config, known_hosts or the hostfile: they are the same for
    any command and environment."""
    job = inside_out_job(image="x", nodes=3, command=command, env=env, slots=2)
    d = inside_out.make_job_dir(job)
    try:
        assert (d / "ssh_config").read_text() == inside_out.SSH_CONFIG
        assert (d / "hostfile").read_text() == "node0 slots=2\nnode1 slots=2\nnode2 slots=2\n"
        assert (d / "known_hosts").read_text().startswith("* ssh-ed25519 ")
        assert (d / "start.sh").read_text() == inside_out.START_SH
    finally:
        import shutil
        shutil.rmtree(d)


@PROPERTY
@given(command=commands, env=env_values, image=_or("site/img:1"))
def test_mpijob_manifest_loads_back_to_the_same_values(command, env, image):
    try:
        spec = mpijob_job(name="job", image=image or "x", workers=2, command=command, env=env)
    except UsageError:
        return
    text = mpijob.render(spec)
    loaded = yaml.safe_load(text)
    assert loaded == mpijob.build(spec)
    launcher = loaded["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][-len(command):] == command and launcher["image"] == spec.workload.image


@pytest.mark.parametrize("kw,field", [
    ({"job_name": "x\n#SBATCH --wrap=id"}, "--job-name"),
    ({"partition": "gpu; touch /x"}, "--partition"),
    ({"time": "1:00 -p x"}, "--time"),
    ({"command": ["--wrap=touch /x"]}, "command"),
    ({"command": ["python3", "a\x00b"]}, r"command\[1\]"),
    ({"image": "img\nIMAGEKIT_RANK_WRAPPER"}, "image"),
    ({"workdir": "/w\nd"}, "--workdir"),
    ({"env": {"A;B": "1"}}, "--env name"),
    ({"container_name": "a,b"}, "--container-name"),
    ({"mounts": [Mount("/a b", "/a b")]}, "mount source"),
])
def test_bad_launch_values_are_refused_naming_the_field(kw, field):
    base = dict(image="img", nodes=1, command=["true"])
    with pytest.raises(quoting.UnsafeValue, match=rf"^launch: {field} "):
        slurm_job(**{**base, **kw})


def _shape(doc, path=()):
    """Every key path of a manifest (list items by position): what a YAML injection would change."""
    if isinstance(doc, dict):
        return {p for k, v in doc.items() for p in _shape(v, (*path, k))} | {path}
    if isinstance(doc, list):
        return {p for i, v in enumerate(doc) for p in _shape(v, (*path, i))} | {path}
    return {path}


@PROPERTY
@given(image=_or("site/img:1"), namespace=st.one_of(st.none(), words), cpu=st.one_of(st.none(), words),
       memory=st.one_of(st.none(), words), shm=st.one_of(st.none(), words), ssh_path=_or("/root/.ssh"),
       env=env_values, image_env=env_values)
def test_mpijob_values_never_change_the_manifests_shape(image, namespace, cpu, memory, shm, ssh_path, env,
                                                         image_env):
    """Issue 33 ("not tried" by the third review): every string an MPIJob takes, hostile, in every field
    at once. Either it is refused naming the field, or the manifest loads back to exactly what was
    built, with the same keys, in the same places, as one made of plain values."""
    kw = dict(name="job", workers=2, command=["true"], namespace=namespace, cpu=cpu, memory=memory, shm_size=shm,
              ssh_auth_mount_path=ssh_path, env=env, image_env=image_env)
    try:
        spec = mpijob_job(image=image or "x", **kw)
    except UsageError:
        event("refused")
        return
    event("written")
    loaded = yaml.safe_load(mpijob.render(spec))
    assert loaded == mpijob.build(spec)
    plain = mpijob_job(image="x", **{**kw, "namespace": namespace and "ns", "cpu": cpu and "1",
                                            "memory": memory and "1Gi", "shm_size": shm and "1Gi",
                                            "ssh_auth_mount_path": "/root/.ssh",
                                            "env": {k: "v" for k in env}, "image_env": {k: "v" for k in image_env}})
    assert _shape(loaded) == _shape(mpijob.build(plain))


@pytest.mark.parametrize("field,value", [("namespace", "ns\nkind: Secret"), ("cpu", "1\n- x"),
                                          ("memory", "8 Gi"), ("shm_size", "{a: b}"),
                                          ("ssh_auth_mount_path", "/root/../etc")])
def test_mpijob_refuses_what_kubernetes_would_not_take_naming_the_field(field, value):
    with pytest.raises(UsageError, match="namespace|quantity|sshAuthMountPath"):
        mpijob_job(name="job", image="img", workers=1, command=["true"], **{field: value})
