"""The image's own MPI, as far as starting its ranks on other hosts goes: Open MPI 4 (ORTE) or 5 (PRRTE).

Open MPI 5 starts its daemons through PRRTE, which ignores ORTE's ``OMPI_MCA_orte_*`` and
``OMPI_MCA_plm_rsh_args``: given only those (what the MPI Operator and Kubeflow Trainer set), ``mpirun``
reads no hostfile and runs every rank on the launcher, and exits 0 (kubeflow/trainer#4028,
mpi-operator#842). So every output that has an ``mpirun`` start ranks elsewhere names the hostfile,
the ssh options and the host-name rule in the image's own MPI's words, which the image's facts say
(its ``mpi`` role's component and version); where they cannot say, both sets, each ignored by the
other MPI.

PRRTE's names: ``PRTE_MCA_prte_default_hostfile``, ``PRTE_MCA_plm_ssh_args`` and
``PRTE_MCA_prte_keep_fqdn_hostnames=false``: kept FQDNs never match the name PRRTE resolves for the
launcher itself, which it then tries to reach over ssh (kubeflow/trainer#4029).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagekit.image_facts import ImageFacts, role_label

OPEN_MPI = "openmpi"
# The ssh options a job's launcher uses to reach its workers: pods and containers are new on every run,
# so there is no host key to know (the job's private network is the trust boundary), and a worker's
# sshd may still be starting.
SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10"
# Each runtime's names for the hostfile, the ssh options and keeping hosts' FQDNs, and the value that
# last one needs: ORTE keeps the FQDNs the operators' hostfiles hold; PRRTE must not, or the launcher's
# own FQDN entry never matches the name it resolves for itself.
ORTE = ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_keep_fqdn_hostnames", "true")
PRRTE = ("PRTE_MCA_prte_default_hostfile", "PRTE_MCA_plm_ssh_args", "PRTE_MCA_prte_keep_fqdn_hostnames", "false")


@dataclass(frozen=True)
class MpiFlavour:
    """The image's MPI: Open MPI's ``major`` version (None: not known, or not Open MPI), and ``known``:
    the image's facts say which MPI it has."""

    major: int | None = None
    name: str | None = None

    @classmethod
    def of(cls, facts: ImageFacts | None) -> "MpiFlavour":
        """What ``facts`` (None: not read) record of the image's MPI."""
        if facts is None or not facts.known:
            return cls()
        mpi = facts.provider("mpi")
        if mpi is None:
            return cls()
        # A bundle's own version (HPC-X 2.21) is not its Open MPI's: only the role's label says that.
        said = mpi.version if mpi.name == OPEN_MPI else (facts.labels or {}).get(role_label("mpi", "version"))
        m = re.match(r"\D*(\d+)", said or "")
        # A bundle built on Open MPI says so in its own facts (its `ompi` series), so that no launch
        # code names a bundle.
        name = OPEN_MPI if mpi.name == OPEN_MPI or mpi.fact("ompi") else mpi.name
        return cls(major=int(m.group(1)) if m else None, name=name)

    @property
    def open_mpi(self) -> bool | None:
        """True for Open MPI (or an image whose MPI is not known: imagekit's are), False for another MPI."""
        return None if self.name is None else self.name == OPEN_MPI

    @property
    def orte(self) -> bool:
        """Open MPI 4 or older, or not known: ORTE's names are set."""
        return self.major is None or self.major < 5

    @property
    def prrte(self) -> bool:
        """Open MPI 5 or newer, or not known: PRRTE's names are set."""
        return self.major is None or self.major >= 5

    @property
    def said(self) -> str:
        return f"Open MPI {self.major}" if self.major is not None else "an MPI the image's facts do not name"

    def env(self, hostfile: str | None = None, ssh_args: str | None = SSH_ARGS) -> dict[str, str]:
        """The variables that make ``mpirun`` start ranks on the hosts of ``hostfile`` over ssh with
        ``ssh_args``, in this MPI's words (both sets where it is not known)."""
        out: dict[str, str] = {}
        for used, (hostfile_name, ssh_name, fqdn_name, fqdn) in ((self.orte, ORTE), (self.prrte, PRRTE)):
            if not used:
                continue
            out.update({k: v for k, v in ((hostfile_name, hostfile), (ssh_name, ssh_args)) if v})
            out[fqdn_name] = fqdn
        return out

    @property
    def daemon(self) -> tuple[str, ...]:
        """The programs mpirun starts on each remote host (ORTE's orted, PRRTE's prted)."""
        return (("orted",) if self.orte else ()) + (("prted",) if self.prrte else ())
