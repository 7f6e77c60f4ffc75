"""The pods a Kubernetes MPI manifest describes, run as containers on one private network.

No API server runs here, so what the controllers would do with a manifest is done by this module,
each as its own source does it at the commit named below (read in the projects' repositories), and
nothing more:

- **MPI Operator** (kubeflow/mpi-operator caa3c47, 2026-07-02, pkg/controller/mpi_job_controller.go):
  workers ``<job>-worker-<i>`` and launcher ``<job>-launcher``, hostname and subdomain ``<job>``; the
  ssh Secret's items ``id_rsa``, ``id_rsa.pub`` and ``authorized_keys`` (mode 0600 at ``/root/.ssh``,
  else 0644) at ``sshAuthMountPath``; the hostfile ``<host>.<job>.<ns>.svc slots=N`` at /etc/mpi; the
  launcher's env gains ``K_MPI_JOB_ROLE``, ORTE's hostfile, keep-FQDN and ``plm_rsh_args`` and the
  slots, *appended* after the manifest's (so they win), and ``NVIDIA_*`` emptied; workers' DNS search
  gains ``<job>.<ns>.svc.cluster.local``.
- **Kubeflow Trainer** (kubeflow/trainer v2.3.0 line, 8c0f505, 2026-08-21: pkg/runtime/framework/plugins/
  mpi/mpi.go, jobset/jobset.go, pkg/constants): the runtime's JobSet with the TrainJob's ``numNodes``
  on the ``node`` job and its image, command, args and env on the container ``node`` of the job
  labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``; on every container named
  ``node``, the Secret ``<job>-mpi-ssh-auth`` (``id_rsa`` 0640, ``id_rsa.pub`` and ``authorized_keys``
  0644) at ``sshAuthMountPath``; on the launcher's, the hostfile (its endpoints
  ``<job>-<rjob>-<i>-<pod>.<subdomain>``) at /etc/mpi and ORTE's four variables *upserted*.
- **JobSet** (kubernetes-sigs/jobset v1alpha2): pod hostnames ``<jobset>-<rjob>-<job index>-<pod
  index>`` and subdomain ``<jobset>`` (or ``network.subdomain``), ``dependsOn`` honoured by starting
  the jobs it waits for first.
- **kubelet**: a pod's env in order, the last of a name winning; a Secret or ConfigMap volume is a
  directory of mode 0777 (emptyDir's ``perm``) holding root's files with the items' modes; pod DNS
  searches ``<ns>.svc.cluster.local svc.cluster.local cluster.local`` with ``ndots:5``, and a pod with a
  hostname and subdomain resolvable as ``<host>.<subdomain>.<ns>.svc.cluster.local`` (Docker's network
  aliases stand in for cluster DNS; a pod's short hostname resolves only inside itself).

What it does not do: scheduling, restarts, readiness beyond sshd listening, admission webhooks, CEL
rules, resource limits, security contexts. Containers run with the engine's defaults as root.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from helpers.polling import wait_for

DOCKER = "/usr/bin/docker"
NAMESPACE = "default"
CLUSTER = "cluster.local"
LABEL = "io.imagekit.test.pods"
SECRET_DIR_MODE = 0o777        # kubelet: Secret and ConfigMap volumes wrap an emptyDir (perm 0777)
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


@dataclass
class Volume:
    """A Secret or ConfigMap as kubelet mounts it: ``files`` (name -> (bytes, mode)) at ``path``."""

    path: str
    files: dict[str, tuple[bytes, int]]


@dataclass
class Pod:
    name: str
    hostname: str
    subdomain: str
    image: str
    command: list[str]
    args: list[str] = field(default_factory=list)
    env: list[dict] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    worker: bool = True            # started first, and ready once its sshd listens
    shm: str | None = None

    @property
    def fqdn(self) -> str:
        return f"{self.hostname}.{self.subdomain}.{NAMESPACE}.svc.{CLUSTER}"

    def resolved_env(self) -> dict[str, str]:
        """kubelet's environment: every entry in order, a later one of the same name replacing it."""
        out: dict[str, str] = {}
        for entry in self.env:
            out[entry["name"]] = entry.get("value", "")
        return out


def ssh_keys(work: Path) -> dict[str, bytes]:
    """A key pair as the operators make one (ECDSA P-521, PEM): ``ssh-privatekey``, ``ssh-publickey``."""
    key = work / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-f", str(key)],
                   check=True)
    return {"ssh-privatekey": key.read_bytes(), "ssh-publickey": Path(f"{key}.pub").read_bytes()}


# --- the MPI Operator ------------------------------------------------------------------------------

def mpijob_pods(manifest: dict, keys: dict[str, bytes]) -> list[Pod]:
    spec, name = manifest["spec"], manifest["metadata"]["name"]
    slots = spec.get("slotsPerWorker", 1)
    mount = spec.get("sshAuthMountPath", "/root/.ssh")
    mode = 0o600 if mount == "/root/.ssh" else 0o644
    secret = Volume(mount, {"id_rsa": (keys["ssh-privatekey"], mode), "id_rsa.pub": (keys["ssh-publickey"], mode),
                            "authorized_keys": (keys["ssh-publickey"], mode)})
    workers = spec["mpiReplicaSpecs"]["Worker"]
    count = workers.get("replicas", 0)
    hostfile = "".join(f"{name}-worker-{i}.{name}.{NAMESPACE}.svc slots={slots}\n" for i in range(count))
    out = []
    for i in range(count):
        c = workers["template"]["spec"]["containers"][0]
        out.append(Pod(f"{name}-worker-{i}", f"{name}-worker-{i}", name, c["image"],
                       c.get("command") or (["/usr/sbin/sshd", "-De"] if not c.get("args") else []), c.get("args", []),
                       c.get("env", []) + [{"name": "K_MPI_JOB_ROLE", "value": "worker"}], [secret],
                       searches=[f"{name}.{NAMESPACE}.svc.{CLUSTER}"], shm=_shm(workers["template"]["spec"])))
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    c = launcher["template"]["spec"]["containers"][0]
    env = c.get("env", []) + [
        {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
        {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
    config = Volume("/etc/mpi", {"hostfile": (hostfile.encode(), 0o444), "discover_hosts.sh": (b"#!/bin/sh\n", 0o555)})
    out.append(Pod(f"{name}-launcher", f"{name}-launcher", name, c["image"], c.get("command", []), c.get("args", []),
                   env, [secret, config], worker=False, shm=_shm(launcher["template"]["spec"])))
    return out


# --- JobSet, and Kubeflow Trainer on top of it ------------------------------------------------------

def jobset_pods(jobset: dict, volumes: dict[str, Volume], name: str | None = None) -> list[Pod]:
    """The pods of a JobSet; ``volumes`` are the Secrets and ConfigMaps its pods name (by the volume's
    name in the pod spec), as a cluster admin would have created them."""
    name = name or jobset["metadata"]["name"]
    spec = jobset["spec"]
    subdomain = (spec.get("network") or {}).get("subdomain") or name
    jobs = {rj["name"]: rj for rj in spec["replicatedJobs"]}
    waits = {n for rj in jobs.values() for n in (d["name"] for d in rj.get("dependsOn", []))}
    out = []
    for rj in sorted(jobs.values(), key=lambda r: r["name"] not in waits):
        job_spec = rj["template"]["spec"]
        pod_spec = job_spec["template"]["spec"]
        for j in range(rj.get("replicas", 1)):
            for p in range(job_spec.get("parallelism", 1)):
                c = pod_spec["containers"][0]
                mounted = [Volume(m["mountPath"], volumes[m["name"]].files) for m in c.get("volumeMounts", [])
                           if m["name"] in volumes]
                host = f"{name}-{rj['name']}-{j}-{p}"
                out.append(Pod(host, host, subdomain, c["image"], c.get("command", []), c.get("args", []),
                               c.get("env", []), mounted, worker=rj["name"] in waits, shm=_shm(pod_spec)))
    return out


def trainjob_jobset(runtime: dict, trainjob: dict) -> dict:
    """The JobSet Trainer makes of a (Cluster)TrainingRuntime and a TrainJob (runLauncherAsNode false):
    ``numNodes`` node pods, the trainer's fields on the ancestor's container ``node``, the MPI plugin's
    volumes and variables (on containers named ``node``), returned with the volumes it adds as
    ``_volumes`` (name -> (mountPath, keys of the Secret/ConfigMap the plugin makes))."""
    js = {"metadata": {"name": trainjob["metadata"]["name"]}, "spec": copy.deepcopy(runtime["spec"]["template"]["spec"])}
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    trainer = trainjob["spec"].get("trainer", {})
    nodes = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
    assert not mpi.get("runLauncherAsNode"), "only runLauncherAsNode: false is followed here"
    slots = trainer.get("numProcPerNode") or mpi.get("numProcPerNode", 1)
    name = js["metadata"]["name"]
    subdomain = (js["spec"].get("network") or {}).get("subdomain") or name
    for rj in js["spec"]["replicatedJobs"]:
        job_spec = rj["template"]["spec"]
        if rj["name"] == "node":
            job_spec["parallelism"] = job_spec["completions"] = nodes
        labels = (rj["template"].get("metadata") or {}).get("labels", {})
        for c in job_spec["template"]["spec"]["containers"]:
            if c["name"] != "node":
                continue
            if labels.get(ANCESTOR) == "trainer":
                for key in ("image", "command", "args"):
                    if key in trainer:
                        c[key] = trainer[key]
                c["env"] = _upsert(c.get("env", []), trainer.get("env", []))
            c.setdefault("volumeMounts", []).append({"name": "mpi-ssh-auth", "mountPath": mpi["sshAuthMountPath"]})
            if rj["name"] == "launcher":
                c["volumeMounts"].append({"name": "mpi-hostfile", "mountPath": "/etc/mpi"})
                c["env"] = _upsert(c.get("env", []), [
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}])
    js["_hostfile"] = "".join(f"{name}-node-0-{i}.{subdomain} slots={slots}\n" for i in range(nodes))
    return js


def trainjob_volumes(jobset: dict, keys: dict[str, bytes]) -> dict[str, Volume]:
    return {"mpi-ssh-auth": Volume("", {"id_rsa": (keys["ssh-privatekey"], 0o640),
                                        "id_rsa.pub": (keys["ssh-publickey"], 0o644),
                                        "authorized_keys": (keys["ssh-publickey"], 0o644)}),
            "mpi-hostfile": Volume("", {"hostfile": (jobset["_hostfile"].encode(), 0o444)})}


def _upsert(env: list[dict], new: list[dict]) -> list[dict]:
    out = [dict(e) for e in env]
    for entry in new:
        at = next((i for i, e in enumerate(out) if e["name"] == entry["name"]), None)
        if at is None:
            out.append(dict(entry))
        else:
            out[at] = dict(entry)
    return out


def _shm(pod_spec: dict) -> str | None:
    for v in pod_spec.get("volumes", []):
        if (v.get("emptyDir") or {}).get("medium") == "Memory":
            return v["emptyDir"].get("sizeLimit", "64m").replace("Gi", "g").replace("Mi", "m")
    return None


# --- running them ----------------------------------------------------------------------------------

@dataclass
class Run:
    rc: int
    output: str
    hosts: list[str]       # the workers' hostnames


def run(pods: list[Pod], *, timeout: float = 300) -> Run:
    """Start the pods (the ones others wait for first, until their sshd listens), wait for the launcher,
    and remove everything; the launcher's exit code and output."""
    tag = uuid.uuid4().hex[:10]
    net = f"ikpods-{tag}"
    work = Path(tempfile.mkdtemp(prefix=f"ikpods-{tag}-"))
    names: list[str] = []
    subprocess.run([DOCKER, "network", "create", "--label", f"{LABEL}={tag}", net], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        for pod in [p for p in pods if p.worker]:
            names.append(_start(pod, net, tag, work))
        for pod, name in zip([p for p in pods if p.worker], names):
            wait_for(lambda n=name: "Server listening" in _logs(n) or _exited(n), f"sshd in {pod.name}", 120)
            assert not _exited(name), f"worker {pod.name} exited: {_logs(name)}"
        (launcher,) = [p for p in pods if not p.worker]
        name = _start(launcher, net, tag, work)
        names.append(name)
        proc = subprocess.run([DOCKER, "wait", name], capture_output=True, text=True, timeout=timeout)
        return Run(int(proc.stdout.strip() or -1), _logs(name), [p.hostname for p in pods if p.worker])
    finally:
        if names:
            subprocess.run([DOCKER, "rm", "-f", *names], capture_output=True)
        subprocess.run([DOCKER, "network", "rm", net], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def _start(pod: Pod, net: str, tag: str, work: Path) -> str:
    name = f"ikpods-{tag}-{pod.name}"[:120]
    argv = [DOCKER, "run", "-d", "--name", name, "--label", f"{LABEL}={tag}", "--network", net,
            "--hostname", pod.hostname, "--domainname", f"{pod.subdomain}.{NAMESPACE}.svc.{CLUSTER}",
            "--network-alias", pod.fqdn, "--dns-option", "ndots:5"]
    for search in pod.searches + [f"{NAMESPACE}.svc.{CLUSTER}", f"svc.{CLUSTER}", CLUSTER]:
        argv += ["--dns-search", search]
    for k, v in pod.resolved_env().items():
        argv += ["-e", f"{k}={v}"]
    for i, vol in enumerate(pod.volumes):
        d = work / f"{pod.name}-{i}"
        d.mkdir()
        for fname, (data, mode) in vol.files.items():
            (d / fname).write_bytes(data)
            (d / fname).chmod(mode)
        d.chmod(SECRET_DIR_MODE)
        argv += ["-v", f"{d}:{vol.path}:ro"]
    if pod.shm:
        argv += ["--shm-size", pod.shm]
    command = pod.command + pod.args
    if pod.command:
        argv += ["--entrypoint", pod.command[0], pod.image, *pod.command[1:], *pod.args]
    else:
        argv += [pod.image, *command]
    subprocess.run(argv, check=True, capture_output=True)
    return name


def _logs(name: str) -> str:
    proc = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True)
    return proc.stdout + proc.stderr


def _exited(name: str) -> bool:
    proc = subprocess.run([DOCKER, "inspect", "-f", "{{.State.Status}}", name], capture_output=True, text=True)
    return proc.stdout.strip() in ("exited", "dead", "")


def ring_hosts(output: str) -> list[str]:
    """The host of each rank of ``imagekit-mpi-ring`` in ``output``, in rank order."""
    ranks = sorted((int(m.group(1)), m.group(2)) for m in
                   re.finditer(r"imagekit-mpi-ring: rank (\d+) of \d+ on (\S+) \(pid \d+\): ok", output))
    return [host for _, host in ranks]
