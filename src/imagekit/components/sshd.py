"""OpenSSH server for inside-out launches (mpirun inside the containers).

The image carries the binaries and a hardened drop-in, never keys: the image's
own host keys are deleted at build time, and the launcher mounts a host key and
a user key made for each job.
"""

from __future__ import annotations

from imagekit import checks
from imagekit.components import _blocks
from imagekit.components._base import Component

DROPIN = "/etc/ssh/sshd_config.d/imagekit.conf"
SETTINGS = ["PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password", "UsePAM no", "PrintMotd no"]


class Sshd(Component):
    name = "sshd"
    summary = "OpenSSH server for inside-out launches; no keys in the image"
    order = 5
    provides = ("sshd",)
    sources = ("distro",)
    distro_versions = {"debian12": "9.2", "debian13": "10.0", "debian11": "8.4", "ubuntu22": "8.9", "ubuntu24": "9.6"}

    def _blocks(self) -> list:
        from hpccm.primitives import shell

        return _blocks.apt_install(self.stack, ["openssh-client", "openssh-server"], "sshd for inside-out launches") + [
            shell(commands=[
                "rm -f /etc/ssh/ssh_host_*",
                "mkdir -p /run/sshd /etc/ssh/sshd_config.d",
                "printf '%s\\n' " + " ".join(f"'{s}'" for s in SETTINGS) + f" > {DROPIN}",
            ])]

    def devel(self) -> list:
        return self._blocks()

    def runtime(self) -> list:
        return self._blocks()

    def checks(self) -> list:
        return [
            checks.file("sshd.binary", "/usr/sbin/sshd"),
            checks.run("sshd.version", f"ssh is OpenSSH {self.version}", "ssh -V", expect=rf"OpenSSH_{self.version}"),
            checks.run("sshd.no_passwords", "sshd refuses password logins", f"cat {DROPIN}",
                       expect="PasswordAuthentication no"),
            checks.absent("sshd.no_host_keys", "/etc/ssh/ssh_host_*", "the image holds no ssh host keys"),
            checks.absent("sshd.no_user_keys", "/root/.ssh/id_* /home/*/.ssh/id_*",
                          "the image holds no ssh user private keys"),
        ]
