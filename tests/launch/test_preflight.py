"""Preflight: each check against recorded host facts, plus the real host and a real labelled image."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from imagekit.cli import main
from imagekit.launch import preflight as pf

LABELS = {
    "io.imagekit.stack": "debian-mpi", "io.imagekit.components": "pmix,openmpi,ucx,rdma-core,cuda",
    "io.imagekit.component.pmix.version": "4.2.2", "io.imagekit.component.openmpi.version": "4.1.4",
    "io.imagekit.component.openmpi.pmix": "true", "io.imagekit.component.ucx.version": "1.13.1",
    "io.imagekit.component.rdma-core.version": "44.0", "io.imagekit.component.cuda.version": "12.4.1",
}
HOST = dict(shm_bytes=16 << 30, memlock=None, infiniband=True, driver="550.54.15",
            srun_mpi=["pmix", "none", "pmi2", "pmix_v4"], mpirun_version="4.1.4")


def by_name(checks):
    return {c.name: c for c in checks}


def test_all_ok_on_a_matching_host():
    checks = by_name(pf.run("img", scheduler="slurm", launcher="mpirun", labels=LABELS, host=pf.HostFacts(**HOST)))
    assert {c.status for c in checks.values()} == {"ok"}, pf.format_checks(list(checks.values()))


@pytest.mark.parametrize("host_change,check,status,fix_word", [
    ({"srun_mpi": ["none", "pmi2"]}, "slurm pmix", "fail", "pmix"),
    ({"srun_mpi": ["pmix", "pmix_v2"]}, "slurm pmix", "fail", "PMIx 2"),
    ({"srun_mpi": ["pmix", "pmix_v5"]}, "slurm pmix", "warn", "PMIx 5"),
    ({"srun_mpi": None}, "slurm pmix", "fail", "login node"),
    ({"shm_bytes": 64 << 20}, "/dev/shm", "warn", "--shm-size"),
    ({"memlock": 64 * 1024}, "memlock", "warn", "ulimit -l unlimited"),
    ({"infiniband": False}, "/dev/infiniband", "warn", "--device=/dev/infiniband"),
    ({"driver": "470.82.01"}, "GPU driver", "fail", "upgrade the driver"),
    ({"driver": None}, "GPU driver", "not checked", None),
    ({"mpirun_version": "5.0.3"}, "host mpirun", "fail", "Open MPI 4.1.4"),
    ({"mpirun_version": "4.0.7"}, "host mpirun", "warn", "4.1.x"),
    ({"mpirun_version": None}, "host mpirun", "fail", "openmpi-bin"),
])
def test_each_mismatch_is_reported_with_its_fix(host_change, check, status, fix_word):
    host = pf.HostFacts(**{**HOST, **host_change})
    c = by_name(pf.run("img", scheduler="slurm", launcher="mpirun", labels=LABELS, host=host))[check]
    assert c.status == status, c
    if fix_word:
        assert fix_word in (c.fix or ""), c


def test_image_side_problems():
    no_mpi = {k: v for k, v in LABELS.items() if "openmpi" not in k}
    no_mpi["io.imagekit.components"] = "cuda"
    assert by_name(pf.run("img", labels=no_mpi, host=pf.HostFacts(**HOST)))["image MPI"].status == "fail"
    no_sshd = by_name(pf.run("img", launcher="inside-out", labels=LABELS, host=pf.HostFacts(**HOST)))["image sshd"]
    assert no_sshd.status == "fail" and "sshd component" in no_sshd.fix
    cuda13 = {**LABELS, "io.imagekit.component.cuda.version": "13.0.0"}
    assert by_name(pf.run("img", labels=cuda13, host=pf.HostFacts(**HOST)))["GPU driver"].status == "fail"
    nopmix = {**LABELS, "io.imagekit.component.openmpi.pmix": "false"}
    assert by_name(pf.run("i", scheduler="slurm", labels=nopmix, host=pf.HostFacts(**HOST)))["slurm pmix"].status == "warn"


def test_file_images_say_not_checked():
    checks = pf.run("./mpi.sqsh", launcher="slurm", host=pf.HostFacts(**HOST))
    c = by_name(checks)
    assert c["image labels"].status == "not checked" and "file image" in c["image labels"].detail
    assert c["image MPI"].status == "not checked" and not pf.failed(checks)


def test_srun_mpi_list_formats():
    text = "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\nspecific pmix plugin versions available: pmix_v4\n"
    assert pf.parse_srun_mpi_list(text) == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]
    assert pf.parse_srun_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmix_v3\nsrun: pmi2\n") == \
        ["none", "pmix_v3", "pmi2"]


def test_real_host_probe_and_cli_json():
    host = pf.HostFacts.probe(want_mpirun=True)
    assert host.shm_bytes and host.shm_bytes > 0
    res = CliRunner().invoke(main, ["preflight", "--image", "./x.sif", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] is True and {c["name"] for c in data["checks"]} >= {"image labels", "/dev/shm", "memlock"}
    res = CliRunner().invoke(main, ["preflight", "--image", "x", "--scheduler", "pbs"])
    assert res.exit_code == 2 and "unknown scheduler" in res.output


@pytest.mark.engine
def test_labels_are_read_from_a_real_image(base_image, tmp_path):
    tag = "imagekit-test/preflight-labels:latest"
    labels = "".join(f' --label "{k}={v}"' for k, v in {**LABELS, "io.imagekit.component.pmix.version": "2.2.5"}.items())
    subprocess.run(f"printf 'FROM {base_image}\\n' | /usr/bin/docker build -q {labels} -t {tag} -",
                   shell=True, check=True, stdout=subprocess.DEVNULL)
    host = pf.HostFacts(**HOST)
    c = by_name(pf.run(tag, scheduler="slurm", host=host))
    assert c["image labels"].status == "ok" and "debian-mpi" in c["image labels"].detail
    assert c["slurm pmix"].status == "fail" and "2.2.5" in c["slurm pmix"].detail
    res = CliRunner().invoke(main, ["preflight", "--image", tag, "--json"])
    assert json.loads(res.output)["image"] == tag


@pytest.mark.engine
def test_probe_finds_mpi_in_a_throwaway_container_and_leaves_none(mpi_image, base_image):
    from imagekit import engine, owners

    def mine():
        return engine.client().containers.list(all=True, filters={"label": f"{owners.LABEL}={owners.me()}"},
                                               sparse=True)

    before = mine()
    found = pf.probe_image(mpi_image)
    assert found["mpirun"].endswith("/mpirun") and "Open MPI" in found["mpi_version"] and found["sshd"] == "yes"
    assert pf.probe_image(base_image) == {"mpirun": ""}
    assert mine() == before
