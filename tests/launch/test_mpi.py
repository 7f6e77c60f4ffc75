"""The image's MPI, from its labels, and the words each Open MPI reads for the hostfile and ssh.

That these words put ranks on distinct hosts is proven by running them (test_distinct_hosts.py); here,
which words an image gets from what its labels say.
"""

from __future__ import annotations

import pytest

from imagekit import image_facts
from imagekit.launch.mpi import PRRTE, ORTE, MpiFlavour
from imagekit.launch.traits import ImageTraits


def facts(mpi: str | None, version: str = "", **component_facts: str) -> image_facts.ImageFacts:
    labels = {"io.imagekit.schema": "2", "io.imagekit.stack": "t"}
    if mpi:
        labels.update({"io.imagekit.components": mpi, f"io.imagekit.component.{mpi}.version": version,
                       f"io.imagekit.component.{mpi}.source": "distro", "io.imagekit.role.mpi": mpi})
        labels.update({f"io.imagekit.component.{mpi}.{k}": v for k, v in component_facts.items()})
    return image_facts.from_labels(labels, ref="x")


@pytest.mark.parametrize("labels, orte, prrte", [
    (facts("openmpi", "4.1.4"), True, False),
    (facts("openmpi", "5.0.7"), False, True),
    (facts("openmpi", "5.0.10"), False, True),
    (facts("hpcx", "2.21"), True, True),        # a bundle: its version is not Open MPI's; both, each ignored by the other
    (facts(None), True, True),                  # labels without an MPI
    (image_facts.from_labels(None, ref="x", reason="not read"), True, True),
])
def test_each_open_mpi_gets_its_own_words_and_an_unknown_one_both(labels, orte, prrte):
    env = MpiFlavour.of(labels).env(hostfile="/etc/mpi/hostfile")
    assert (ORTE[0] in env, PRRTE[0] in env) == (orte, prrte)
    if prrte:
        assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi/hostfile"
        assert env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "false"
        assert "StrictHostKeyChecking=no" in env["PRTE_MCA_plm_ssh_args"]
    if orte:
        assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"


def test_an_mpi_that_is_not_open_mpi_is_said_so():
    assert MpiFlavour.of(facts("mpich", "4.2.0")).open_mpi is False
    assert MpiFlavour.of(facts("openmpi", "5.0.7")).open_mpi is True


def test_a_bundle_built_on_open_mpi_says_so_in_its_own_facts():
    """HPC-X labels its Open MPI series (`ompi`); the launch side reads that fact, never the bundle's name."""
    assert MpiFlavour.of(facts("hpcx", "2.22.1", ompi="4.1")).open_mpi is True
    assert MpiFlavour.of(facts("some-bundle", "1.0")).open_mpi is False
    assert MpiFlavour.of(None).open_mpi is None


def test_traits_read_cuda_major_nccl_and_the_images_own_net_plugin():
    labels = {"io.imagekit.schema": "2", "io.imagekit.components": "cuda,nccl,aws-ofi-nccl",
              "io.imagekit.component.cuda.version": "13.0.2", "io.imagekit.component.cuda.major": "13",
              "io.imagekit.role.cuda": "cuda", "io.imagekit.component.nccl.version": "2.27",
              "io.imagekit.role.nccl": "nccl", "io.imagekit.component.aws-ofi-nccl.version": "1.21.1",
              "io.imagekit.role.nccl-net-plugin": "aws-ofi-nccl", "io.imagekit.base": "ubuntu:noble"}
    traits = ImageTraits.of(image_facts.from_labels(labels, ref="x"))
    assert (traits.cuda_major, traits.nccl, traits.net_plugin, traits.base) == (13, True, True, "ubuntu:noble")
    assert ImageTraits.of(None) == ImageTraits()
