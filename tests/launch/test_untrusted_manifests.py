"""Hostile values in the manifests and files of the Kubernetes, SkyPilot and EDF targets.

Every value a user or an image hands a target (the command's words, the job's and the image's
environment, the image, mounts, the working directory) either reads back from the written document as
exactly itself, or is refused with one line: a newline, ``---``, quotes, ``key: value``, ``[table]``,
``${VAR}`` or ``$`` never add a document, a key or a table, and never expand (EDF's ``$$``). The YAML and
TOML are read back with the parsers the projects use (PyYAML's safe loader; Python's tomllib for TOML
1.0, which the Container Engine reads). Slurm, mpirun and inside-out scripts have their own such tests
(test_untrusted_launch_values.py, test_image_env_stays_in_containers.py).

Each test's hostile text includes the structure of its own format. It cannot check how the cluster
would interpret a value once read (a ``$VAR`` in a Kubernetes ``command`` is the container's business).
"""

from __future__ import annotations

import subprocess
import tomllib

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.hostile import nul_free_words, words
from imagekit.util.errors import UsageError
from imagekit.launch import plan, targets
from imagekit.launch.common import Mount
from imagekit.launch.request import LaunchRequest

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRUCTURE = ["---", "\n---\nkind: Secret\n", "a: b", "key = \"v\"", "[env]", "\n[annotations]\nx = 1\n", "${HOME}",
             "$$", "$", "'", '"', "\\", "\n", "# x", "- x", "{a: 1}", "!!python/object/apply:os.system [id]", "\x7f"]
hostile = st.one_of(st.sampled_from(STRUCTURE), words,
                    st.lists(st.sampled_from(STRUCTURE), min_size=1, max_size=4).map("".join))
names = st.sampled_from(["A", "NOTE", "NCCL_DEBUG", "UCX_TLS", "X_1"])
envs = st.dictionaries(names, hostile, max_size=3)
commands = st.builds(lambda head, rest: [head, *rest], nul_free_words.filter(lambda w: w and not w.startswith("-")),
                     st.lists(hostile, max_size=3))


def _files(target: str, image: str, command: list[str], env: dict, **options) -> list[str] | None:
    """The texts a target writes for this request, or None after checking a refusal is one line."""
    try:
        job = plan.job(targets.of(target), LaunchRequest(image, tuple(command), preflight=False, env=env,
                                                         runtime=options.pop("runtime", None),
                                                         mounts=tuple(options.pop("mounts", ())),
                                                         workdir=options.pop("workdir", None), options=options))
        texts = [o.text for o in job.starter.files(job)]
    except UsageError as exc:
        assert "\n" not in exc.message and "\n" not in (exc.hint or ""), exc.message
        event("refused")
        return None
    event("written")
    return texts


def _argv_tail(command: list, words: list[str]) -> list[str]:
    return [str(a) for a in command[-len(words):]] if words else []


@PROPERTY
@given(command=commands, env=envs, image=st.one_of(st.just("reg/img:1"), hostile))
@pytest.mark.parametrize("target", ["mpijob", "trainer", "jobset"])
def test_kubernetes_manifests_read_back_to_the_same_values(target, command, env, image):
    size = {"workers": 2} if target == "mpijob" else {"nodes": 2}
    texts = _files(target, image, command, env, **size)
    if texts is None:
        return
    (text,) = texts
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert [d["kind"] for d in docs] == {"mpijob": ["MPIJob"], "trainer": ["ClusterTrainingRuntime", "TrainJob"],
                                         "jobset": ["ConfigMap", "JobSet"]}[target]
    containers = [c for d in docs for c in _containers(d)]
    assert containers and all(c["image"] == image for c in containers)
    launcher = next(c for d in docs for c in _launchers(d))
    assert _argv_tail(launcher["command"], command) == command
    seen: dict[str, set] = {}
    for c in containers + [launcher]:
        for e in c.get("env", []):
            seen.setdefault(e["name"], set()).add(e["value"])
    assert all(seen.get(k) == {v} for k, v in env.items()), (env, seen)


def _containers(doc: dict) -> list[dict]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "containers" in node:
                found.extend(node["containers"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)
    return found


def _launchers(doc: dict) -> list[dict]:
    if doc["kind"] == "TrainJob":
        return [doc["spec"]["trainer"]]
    return [c for c in _containers(doc) if "imagekit-launcher" in (c.get("command") or [])]


STUB_MPIRUN = """#!/bin/sh
printf '%s\\0' "$@" > "$IK_ARGV"
env > "$IK_ENV"
"""


@PROPERTY
@given(command=commands, env=envs, image=st.one_of(st.just("reg/img:1"), hostile))
def test_skypilot_task_reads_back_to_the_same_values(command, env, image, tmp_path_factory):
    texts = _files("skypilot", image, command, env, nodes=2)
    if texts is None:
        return
    (task,) = [yaml.safe_load(t) for t in texts]
    assert set(task) <= {"name", "num_nodes", "resources", "envs", "run"}
    assert task["resources"]["image_id"] == f"docker:{image}"
    assert task.get("envs", {}) == env
    # The run script, run as SkyPilot runs it on node 0 (bash, its variables set), with a stub mpirun:
    # the command's words reach mpirun as they are, and the hostfile names both nodes.
    work = tmp_path_factory.mktemp("sky")
    (work / "mpirun").write_text(STUB_MPIRUN)
    (work / "mpirun").chmod(0o755)
    proc = subprocess.run(["bash", "-c", task["run"]], capture_output=True, text=True, cwd=work,
                          env={"PATH": f"{work}:/usr/bin:/bin", "HOME": str(work), "IK_ARGV": str(work / "argv"),
                               "IK_ENV": str(work / "env"), "SKYPILOT_NODE_RANK": "0",
                               "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"})
    assert proc.returncode == 0, proc.stderr
    argv = (work / "argv").read_bytes().split(b"\0")[:-1]
    assert [a.decode("utf-8", "surrogateescape") for a in argv[-len(command):]] == command
    assert (work / ".imagekit-hostfile").read_text() == "10.0.0.1 slots=1\n10.0.0.2 slots=1\n"


def _unexpand(value: str) -> str:
    """What the Container Engine makes of a value: ``$$`` is ``$``, and a lone ``${`` would be expanded."""
    assert "${" not in value.replace("$$", ""), value
    return value.replace("$$", "$")


@PROPERTY
@given(env=envs, image=st.one_of(st.just("reg#org/img:1"), hostile), workdir=st.one_of(st.none(), hostile),
       src=st.one_of(st.just("/scratch"), hostile))
@pytest.mark.parametrize("runtime", ["edf", "sarus-suite"])
def test_edf_reads_back_to_the_same_values_and_expands_nothing(runtime, env, image, workdir, src):
    try:
        mounts = [Mount(src, "/data")]
    except UsageError:
        mounts = []
    texts = _files("slurm", image, ["./app"], env, runtime=runtime, nodes=1, mounts=mounts,
                   workdir=("/" + workdir) if workdir is not None else None)
    if texts is None:
        return
    _script, toml = texts
    doc = tomllib.loads(toml)
    assert set(doc) <= {"image", "entrypoint", "workdir", "mounts", "devices", "env", "annotations"}
    assert _unexpand(doc["image"]) == image
    assert {k: _unexpand(v) for k, v in doc.get("env", {}).items() if k in env} == env
    if workdir is not None:
        assert _unexpand(doc["workdir"]) == "/" + workdir
    assert [_unexpand(m) for m in doc.get("mounts", [])] == [f"{m.src}:{m.dst}" for m in mounts]


def test_a_request_a_target_cannot_express_is_one_line_naming_the_target_and_field(tmp_path):
    cases = [
        ("slurm", {"runtime": "sarus-suite", "nodes": 1}, "./mpi.sqsh", "sarus-suite: image: ./mpi.sqsh is a file path"),
        ("skypilot", {"nodes": 2, "gpus": 8}, "reg/img:1", "skypilot: resources.accelerators: 8 GPUs per node"),
        ("skypilot", {"nodes": 2, "mounts": [Mount("/data", "/data")]}, "reg/img:1", "skypilot: file_mounts:"),
        ("trainer", {"nodes": 2, "flux": True}, "reg/img:1", "trainer --flux: FLUX_VIEW_IMAGE:"),
    ]
    for target, options, image, message in cases:
        with pytest.raises(UsageError) as err:
            plan.job(targets.of(target), LaunchRequest(image, ("./app",), preflight=False,
                                                       runtime=options.pop("runtime", None),
                                                       mounts=tuple(options.pop("mounts", ())), options=options))
        assert err.value.message.startswith(message) and "\n" not in err.value.message, err.value.message
