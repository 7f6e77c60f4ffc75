"""Open MPI 4 and 5 ranks land on distinct hosts: every MPI output, run as the cluster would run it.

For the Kubernetes targets (MPIJob, Trainer, JobSet) the test starts the pods the manifest describes,
each as a container with the manifest's own command, env, hostname and subdomain on one private network
(tests/helpers/cluster_pods.py does what the MPI Operator, Trainer, JobSet and kubelet would, as their
sources say), runs imagekit's MPI ring across the workers and asserts one rank per worker hostname. A
ring that passes on one host is a failure here: that is how Open MPI 5 fails under the operators' ORTE
settings (kubeflow/trainer#4028, mpi-operator#842), silently.

It cannot check: the operators' controllers themselves (no API server: their behaviour is copied from
their source at a commit, and a later release may differ), admission webhooks and CEL rules (see
test_manifest_specs.py), schedulers, restarts, GPUs or an RDMA fabric (ranks talk TCP over a bridge),
and readiness other than sshd listening.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from helpers import cluster_pods
from imagekit.cli import main
from imagekit.launch import inside_out, plan, targets
from imagekit.launch.request import LaunchRequest

pytestmark = pytest.mark.engine

BEFORE = Path(__file__).parent / "data" / "mpijob-before-67b9026.yaml"
RING = ["imagekit-mpi-ring", "65536"]
WORKERS = 2


@pytest.fixture(params=["openmpi4", "openmpi5"])
def image(request, mpi_image, ompi5_image) -> str:
    """debian-mpi (Open MPI 4.1.4) and launch-ompi5 (Open MPI 5.0.7), as their labels say."""
    return mpi_image if request.param == "openmpi4" else ompi5_image


def _manifests(tmp_path: Path, target: str, image: str) -> list[dict]:
    out = tmp_path / f"{target}.yaml"
    sizes = ["--workers", str(WORKERS)] if target == "mpijob" else ["--nodes", str(WORKERS)]
    res = CliRunner().invoke(main, ["launch", target, "--name", "ring", "--image", image, *sizes, "-o", str(out),
                                    "--", *RING])
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(out.read_text()) if d]


def _pods(target: str, docs: list[dict], keys: dict) -> list[cluster_pods.Pod]:
    if target == "mpijob":
        (manifest,) = docs
        return cluster_pods.mpijob_pods(manifest, keys)
    if target == "trainer":
        runtime, trainjob = docs
        jobset = cluster_pods.trainjob_jobset(runtime, trainjob)
        return cluster_pods.jobset_pods(jobset, cluster_pods.trainjob_volumes(jobset, keys))
    config, jobset = docs
    # The Secret the site makes once, as the target's help says (id_rsa and authorized_keys).
    secret = cluster_pods.Volume("", {"id_rsa": (keys["ssh-privatekey"], 0o644),
                                      "authorized_keys": (keys["ssh-publickey"], 0o644)})
    hostfile = cluster_pods.Volume("", {"hostfile": (config["data"]["hostfile"].encode(), 0o644)})
    return cluster_pods.jobset_pods(jobset, {"ssh": secret, "hostfile": hostfile})


def assert_one_rank_per_worker(run: cluster_pods.Run) -> None:
    hosts = cluster_pods.ring_hosts(run.output)
    assert run.rc == 0 and "allreduce passed" in run.output, run.output[-3000:]
    assert Counter(hosts) == Counter(run.hosts), f"ranks ran on {hosts}, not one on each of {run.hosts}"


@pytest.mark.parametrize("target", ["mpijob", "trainer", "jobset"])
def test_every_kubernetes_target_puts_one_rank_on_each_worker(target, image, tmp_path):
    docs = _manifests(tmp_path, target, image)
    keys = cluster_pods.ssh_keys(tmp_path)
    assert_one_rank_per_worker(cluster_pods.run(_pods(target, docs, keys)))


def test_inside_out_puts_one_rank_on_each_worker(image, capfd):
    """mpirun inside the first sshd container: Open MPI 5 starts prted there, not orted."""
    job = plan.job(targets.of("inside-out"), LaunchRequest(image, tuple(RING), preflight=False,
                                                           options={"nodes": WORKERS}))
    rc = inside_out.execute(job, log=lambda m: None)
    out = capfd.readouterr().out
    assert rc == 0, out
    assert Counter(cluster_pods.ring_hosts(out)) == Counter(f"node{i}" for i in range(WORKERS)), out


def test_the_mpijob_of_before_fails_the_check(image, tmp_path):
    """The check can fail: the MPIJob imagekit wrote before (67b9026, kept as test data) runs Open MPI 5's
    ranks all on the launcher, exit 0 and "passed" (PRRTE reads none of the operator's ORTE settings);
    under Open MPI 4 its ssh never connects (the operator's plm_rsh_args replaces the manifest's, so
    host keys are checked)."""
    manifest = yaml.safe_load(BEFORE.read_text().replace("IMAGE", image))
    keys = cluster_pods.ssh_keys(tmp_path)
    run = cluster_pods.run(cluster_pods.mpijob_pods(manifest, keys))
    hosts = cluster_pods.ring_hosts(run.output)
    if image.endswith("ompi5:latest"):
        assert run.rc == 0 and "allreduce passed" in run.output and set(hosts) == {"ring-launcher"}, run.output
    else:
        assert run.rc != 0 and "Host key verification failed" in run.output, run.output
    with pytest.raises(AssertionError):
        assert_one_rank_per_worker(run)
