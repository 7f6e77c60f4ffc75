"""MPIJob manifests, validated against the fields of the MPI Operator's v2beta1 API.

No Kubernetes here: the allowed keys below are the documented CRD fields
(kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/types.go: MPIJobSpec, RunPolicy;
kubeflow common ReplicaSpec; core/v1 PodTemplateSpec/Container subsets we emit).
"""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.util.errors import UsageError
from imagekit.launch import mpijob
from helpers.launch_jobs import mpijob as mpijob_job

MPIJOB_SPEC = {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath", "launcherCreationPolicy",
               "mpiImplementation", "runLauncherAsWorker"}
RUN_POLICY = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
              "schedulingPolicy", "suspend", "managedBy"}
REPLICA_SPEC = {"replicas", "template", "restartPolicy"}
RESTART = {"Always", "OnFailure", "Never", "ExitCode"}
CONTAINER = {"name", "image", "command", "args", "env", "resources", "volumeMounts", "securityContext",
             "imagePullPolicy", "workingDir"}


def manifest(**kw) -> dict:
    base = dict(name="nccl", image="reg/img:1", workers=2, gpus_per_worker=8, command=["all_reduce_perf", "-b", "8"],
                env={"NCCL_DEBUG": "INFO"})
    base.update(kw)
    return yaml.safe_load(mpijob.render(mpijob_job(**base)))


def test_structure_matches_the_v2beta1_crd():
    m = manifest()
    assert m["apiVersion"] == "kubeflow.org/v2beta1" and m["kind"] == "MPIJob"
    assert m["metadata"]["name"] == "nccl"
    spec = m["spec"]
    assert set(spec) <= MPIJOB_SPEC
    assert set(spec["runPolicy"]) <= RUN_POLICY and spec["runPolicy"]["cleanPodPolicy"] in ("All", "Running", "None")
    assert spec["mpiImplementation"] in ("OpenMPI", "Intel", "MPICH")
    assert isinstance(spec["slotsPerWorker"], int) and spec["slotsPerWorker"] == 8
    # Not ~/.ssh: a Secret volume's modes are not ssh's; the pods install the keys themselves.
    assert spec["sshAuthMountPath"] == "/etc/imagekit/ssh"
    assert set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    for role, rs in spec["mpiReplicaSpecs"].items():
        assert set(rs) <= REPLICA_SPEC and rs["restartPolicy"] in RESTART
        (container,) = rs["template"]["spec"]["containers"]
        assert set(container) <= CONTAINER and container["image"] == "reg/img:1"
        assert all(isinstance(a, str) for a in container["command"])
        assert "cp /etc/imagekit/ssh/id_rsa /root/.ssh/id_rsa" in container["command"][2]
    assert spec["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "sshd -De" in worker["command"][-1] and "ssh-keygen -A" in worker["command"][-1]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    argv = launcher["command"][launcher["command"].index("imagekit-launcher") + 1:]
    assert argv[:3] == ["mpirun", "-np", "16"] and argv[-3:] == ["all_reduce_perf", "-b", "8"]
    assert "nvidia.com/gpu" not in str(launcher.get("resources", {}))
    assert "&id" not in mpijob.render(mpijob_job(name="a", image="i", workers=1, command=["x"], env={"A": "1"}))


def test_cpu_only_and_bad_input():
    m = manifest(gpus_per_worker=0, slots_per_worker=4, cpu="16", memory="32Gi")
    assert m["spec"]["slotsPerWorker"] == 4
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"] == {"cpu": "16", "memory": "32Gi"}
    with pytest.raises(UsageError, match="DNS-1123"):
        manifest(name="Bad_Name")
    with pytest.raises(UsageError, match="--workers must be >= 1"):
        manifest(workers=0)


def test_cli_writes_the_manifest_atomically(tmp_path):
    out = tmp_path / "job.yaml"
    res = CliRunner().invoke(main, ["launch", "mpijob", "--image", "reg/img:1", "--workers", "2", "-o", str(out),
                                    "--", "./app"])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load(out.read_text())["kind"] == "MPIJob" and list(tmp_path.iterdir()) == [out]
