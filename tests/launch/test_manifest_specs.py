"""What the launch targets write, held to the real projects' own definitions, kept as test data.

- Kubeflow Trainer: PyPI ``kubeflow-trainer-api`` 2.3.0 (its typed models, the test extra) and the
  CRDs of kubeflow/trainer v2.3.0; JobSet: the CRD of kubernetes-sigs/jobset v0.12.0 (and the
  ``JobsetV1alpha2JobSet`` model Trainer's package ships); MPIJob: mpi-operator's v2beta1 CRD.
  Sources, commits and the sha256 of each original file: tests/launch/specs/SOURCES.md.
- SkyPilot: the task and resources JSON schemas of PyPI ``skypilot`` 0.14.1 (its own validation,
  ``sky.utils.schemas``; the package itself pins click < 8.2 and pulls a server stack, so its schemas are
  kept here instead of the package).
- CSCS EDF: every key the Container Engine documents (cscs-docs edf.md, resource-hook.md, Sarus Suite's
  user-guide.md, 2026-08), read back through a TOML parser.

What these cannot check, and so do not claim: the API server's admission webhooks (Trainer rejects the
reserved ORTE names in a TrainJob's env; JobSet defaults and validates), the CRDs' CEL rules
(``x-kubernetes-validations``, e.g. one ML policy only), controllers' behaviour (tests/launch/
test_distinct_hosts.py runs the pods instead), SkyPilot's server-side checks of ``config:`` and plugins,
its cloud catalogue (whether an accelerator exists), and ``sarusctl validate`` (not packaged).
"""

from __future__ import annotations

import gzip
import json
import tomllib
from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from imagekit import image_facts
from imagekit.cli import main
from imagekit.image_facts import reader
from imagekit.launch import preflight

SPECS = Path(__file__).parent / "specs"
KINDS = {("trainer.kubeflow.org/v1alpha1", k) for k in ("TrainJob", "ClusterTrainingRuntime", "TrainingRuntime")}


@lru_cache(maxsize=None)
def crd_schema(kind: str, version: str) -> dict:
    """A CRD's openAPIV3Schema made strict as the API server's ``fieldValidation=Strict`` is: an object
    that lists its properties takes no others (unless it preserves unknown fields)."""
    doc = json.loads(gzip.decompress((SPECS / f"{kind}.{version}.schema.json.gz").read_bytes()))

    def strict(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
                node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)
        return node

    return strict(doc["schema"])


def check_crd(doc: dict) -> None:
    kind, version = doc["kind"], doc["apiVersion"].split("/")[-1]
    jsonschema.Draft7Validator(crd_schema(kind, version)).validate(doc)


def check_model(doc: dict) -> None:
    """Trainer's typed model of the document takes it whole: a field it does not know would be dropped,
    so the round trip must give back the same document."""
    import kubeflow_trainer_api.models as m

    name = {"TrainJob": "TrainerV1alpha1TrainJob", "ClusterTrainingRuntime": "TrainerV1alpha1ClusterTrainingRuntime",
            "TrainingRuntime": "TrainerV1alpha1TrainingRuntime", "JobSet": "JobsetV1alpha2JobSet"}[doc["kind"]]
    assert getattr(m, name).from_dict(doc).to_dict() == doc


def launch(*args: str) -> list[dict]:
    res = CliRunner().invoke(main, ["launch", *args])
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _facts(monkeypatch, labels: dict) -> None:
    facts = image_facts.from_labels({"io.imagekit.schema": "2", "io.imagekit.stack": "t", **labels}, ref="x")
    monkeypatch.setattr(reader, "read_or_reason", lambda ref: facts)


OMPI5 = {"io.imagekit.components": "openmpi", "io.imagekit.component.openmpi.version": "5.0.7",
         "io.imagekit.component.openmpi.source": "distro", "io.imagekit.role.mpi": "openmpi"}


@pytest.mark.parametrize("args", [
    ["--image", "reg/img:1", "--nodes", "2", "--", "./app"],
    ["--name", "nccl", "--namespace", "hpc", "--image", "reg/img:1", "--nodes", "4", "--gpus-per-node", "8",
     "--cpu", "16", "--memory", "64Gi", "--runtime-kind", "TrainingRuntime", "--env", "NCCL_DEBUG=INFO",
     "--", "all_reduce_perf", "-b", "8"],
])
def test_trainer_manifests_meet_trainers_models_and_crds(args, monkeypatch):
    _facts(monkeypatch, OMPI5)
    runtime, trainjob = launch("trainer", *args)
    for doc in (runtime, trainjob):
        check_model(doc)
        check_crd(doc)
    assert runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] == "OpenMPI"
    launcher = next(rj for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] == "launcher")
    node = next(rj for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] == "node")
    assert launcher["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert "metadata" not in node["template"]          # the trainer's command must not replace sshd (#4030)
    names = {e["name"] for e in launcher["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert names == {"PRTE_MCA_prte_default_hostfile", "PRTE_MCA_plm_ssh_args", "PRTE_MCA_prte_keep_fqdn_hostnames"}
    # Trainer's webhook refuses a TrainJob whose env names its reserved ORTE variables (#3491).
    reserved = {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_keep_fqdn_hostnames",
                "OMPI_MCA_orte_set_default_slots"}
    assert not reserved & {e["name"] for e in trainjob["spec"]["trainer"].get("env", [])}


def test_trainer_flux_is_opt_in_and_names_its_view(monkeypatch):
    _facts(monkeypatch, {**OMPI5, "io.imagekit.base": "ubuntu:jammy", "io.imagekit.arch": "x86_64"})
    runtime, trainjob = launch("trainer", "--flux", "--image", "reg/img:1", "--nodes", "2", "--", "./app")
    for doc in (runtime, trainjob):
        check_model(doc)
        check_crd(doc)
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "flux": {"numProcPerNode": 1}}
    env = {e["name"]: e["value"] for e in trainjob["spec"]["trainer"]["env"]}
    assert env["FLUX_VIEW_IMAGE"] == "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"


def test_from_mpijob_makes_the_same_job_a_trainjob(tmp_path):
    mpijob = tmp_path / "job.yaml"
    res = CliRunner().invoke(main, ["launch", "mpijob", "--name", "nccl", "--image", "reg/img:1", "--workers", "3",
                                    "--gpus-per-worker", "4", "--env", "NCCL_DEBUG=INFO", "-o", str(mpijob),
                                    "--", "all_reduce_perf", "-b", "8"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["launch", "trainer", "--from-mpijob", str(mpijob)])
    assert res.exit_code == 0, res.output
    runtime, trainjob = [d for d in yaml.safe_load_all(res.stdout) if d]
    check_model(trainjob)
    check_crd(runtime)
    assert trainjob["metadata"]["name"] == "nccl" and trainjob["spec"]["trainer"]["numNodes"] == 3
    argv = trainjob["spec"]["trainer"]["command"]
    argv = argv[argv.index("imagekit-launcher") + 1:]
    assert argv[:3] == ["mpirun", "-np", "12"] and argv[-3:] == ["all_reduce_perf", "-b", "8"]
    assert "spec.runPolicy.cleanPodPolicy=Running: no TrainJob field" in res.stderr


def test_jobset_manifests_meet_the_jobset_crd_and_model():
    config, jobset = launch("jobset", "--image", "reg/img:1", "--nodes", "3", "--gpus-per-node", "2", "--env",
                            "A=1", "--", "./app")
    check_model(jobset)
    check_crd(jobset)
    assert config["kind"] == "ConfigMap" and config["data"]["hostfile"].splitlines() == [
        f"imagekit-node-0-{i}.imagekit slots=2" for i in range(3)]


def test_mpijob_meets_the_operators_crd():
    (mpijob,) = launch("mpijob", "--image", "reg/img:1", "--workers", "2", "--gpus-per-worker", "8", "--cpu", "4",
                       "--", "./app")
    check_crd(mpijob)


def test_the_strict_schemas_can_fail():
    """A misspelt field, a wrong type and a field of another kind are each refused."""
    (mpijob,) = launch("mpijob", "--image", "reg/img:1", "--workers", "2", "--", "./app")
    for bad in ({**mpijob, "spec": {**mpijob["spec"], "slotsPerWorkers": 1}},
                {**mpijob, "spec": {**mpijob["spec"], "slotsPerWorker": "1"}}):
        with pytest.raises(jsonschema.ValidationError):
            check_crd(bad)
    _config, jobset = launch("jobset", "--image", "reg/img:1", "--nodes", "1", "--", "./app")
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["sshPort"] = 22
    with pytest.raises(jsonschema.ValidationError):
        check_crd(jobset)
    with pytest.raises(AssertionError):
        check_model(jobset)


# --- SkyPilot --------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def sky_schemas() -> dict:
    return json.loads(gzip.decompress((SPECS / "skypilot-task.schema.json.gz").read_bytes()))


def check_sky(task: dict) -> None:
    """SkyPilot's own two steps: the task schema, then the resources schema for ``resources``."""
    schemas = sky_schemas()
    jsonschema.validate(task, schemas["task"])
    jsonschema.validate(task.get("resources", {}), schemas["resources"])


def test_skypilot_task_meets_skypilots_own_schemas(monkeypatch):
    _facts(monkeypatch, OMPI5)
    (task,) = launch("skypilot", "--image", "reg/img:1", "--nodes", "2", "--gpus-per-node", "8", "--accelerator",
                     "H100", "--cpus", "16+", "--env", "NCCL_DEBUG=INFO", "--", "all_reduce_perf", "-b", "8")
    check_sky(task)
    assert task["resources"] == {"image_id": "docker:reg/img:1", "accelerators": "H100:8", "cpus": "16+"}
    assert 'export PRTE_MCA_prte_default_hostfile="$HOME/.imagekit-hostfile"' in task["run"]
    assert "OMPI_MCA_orte_default_hostfile" not in task["run"]          # the image's Open MPI is 5
    with pytest.raises(jsonschema.ValidationError):
        check_sky({**task, "num_node": 2})


# --- CSCS EDF --------------------------------------------------------------------------------------

# Every key the documents name: edf.md (production CE), sarus-suite/user-guide.md (devices), and the
# annotations of resource-hook.md.
EDF_KEYS = {"base_environment", "image", "workdir", "entrypoint", "writable", "mounts", "env", "annotations"}
SARUS_KEYS = EDF_KEYS | {"devices"}
HOOKS = {"com.hooks.aws_ofi_nccl.enabled", "com.hooks.aws_ofi_nccl.variant", "com.hooks.cxi.enabled",
         "com.hooks.netstack.source", "com.hooks.ssh.enabled", "com.hooks.ssh.authorize_ssh_key", "com.hooks.ssh.port",
         "com.hooks.nvidia_cuda_mps.enabled", "com.hooks.dcgm.enabled"}
VARIANTS = {"cuda12", "cuda13", "cuda-dl", "rocm5", "rocm6"}


def flat(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def edf_files(monkeypatch, tmp_path, runtime: str, *args: str) -> tuple[str, dict]:
    script = tmp_path / "job.sbatch"
    monkeypatch.setattr(preflight.HostFacts, "probe", classmethod(lambda cls, **kw: cls(machine="x86_64")))
    res = CliRunner().invoke(main, ["launch", "slurm", "--runtime", runtime, "-N", "2", "-o", str(script), *args])
    assert res.exit_code == 0, res.output
    (toml,) = [p for p in tmp_path.glob("*.toml")]
    return script.read_text(), tomllib.loads(toml.read_text())


def check_edf(doc: dict, runtime: str) -> None:
    assert set(doc) <= (SARUS_KEYS if runtime == "sarus-suite" else EDF_KEYS), set(doc)
    hooks = flat(doc.get("annotations", {}))
    assert set(hooks) <= HOOKS and all(isinstance(v, str) for v in hooks.values()), hooks
    assert hooks.get("com.hooks.aws_ofi_nccl.variant", "cuda-dl") in VARIANTS
    assert all(isinstance(v, str) for v in doc.get("env", {}).values())
    assert all(isinstance(m, str) and m.count(":") >= 1 for m in doc.get("mounts", []))


CUDA12_NCCL = {"io.imagekit.components": "cuda,nccl,openmpi", "io.imagekit.component.cuda.version": "12.4.1",
               "io.imagekit.component.cuda.major": "12", "io.imagekit.role.cuda": "cuda",
               "io.imagekit.component.nccl.version": "2.23.4", "io.imagekit.role.nccl": "nccl", **OMPI5}


@pytest.mark.parametrize("runtime", ["edf", "sarus-suite"])
def test_edf_files_carry_only_documented_keys_and_match_the_image(runtime, monkeypatch, tmp_path):
    _facts(monkeypatch, CUDA12_NCCL)
    script, doc = edf_files(monkeypatch, tmp_path, runtime, "--image", "reg#org/img:1", "--gpus-per-node", "4",
                            "--workdir", "/w", "--mounts", "/scratch:/scratch:ro", "--env", "A=${HOME}", "--", "./app")
    check_edf(doc, runtime)
    hooks = flat(doc["annotations"])
    assert hooks["com.hooks.aws_ofi_nccl.variant"] == "cuda12"
    assert doc["env"]["A"] == "$${HOME}"            # $$ is the engine's literal $: nothing is expanded
    assert doc["env"]["PMIX_MCA_psec"] == "^munge"
    flag = "--edf=" if runtime == "sarus-suite" else "--environment="
    assert f"{flag}{tmp_path.resolve()}/" in script
    if runtime == "sarus-suite":
        assert doc["devices"] == ["nvidia.com/gpu=all"] and hooks["com.hooks.cxi.enabled"] == "true"


def test_an_image_with_its_own_net_plugin_keeps_the_hook_off(monkeypatch, tmp_path):
    _facts(monkeypatch, {**CUDA12_NCCL, "io.imagekit.role.nccl-net-plugin": "aws-ofi-nccl",
                         "io.imagekit.components": "cuda,nccl,openmpi,aws-ofi-nccl",
                         "io.imagekit.component.aws-ofi-nccl.version": "1.21.1"})
    _script, doc = edf_files(monkeypatch, tmp_path, "edf", "--image", "reg#org/img:1", "--", "./app")
    check_edf(doc, "edf")
    assert "com.hooks.aws_ofi_nccl.enabled" not in flat(doc.get("annotations", {}))
