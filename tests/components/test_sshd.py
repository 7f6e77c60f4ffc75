"""sshd: binaries and a hardened drop-in; never keys in the image."""

from __future__ import annotations

import pytest

from helpers.stack_helpers import DEBIAN, load_text, render_text, stage


@pytest.mark.parametrize("fmt", ["docker", "singularity"])
def test_host_keys_removed_and_passwords_off_in_both_stages(tmp_path, fmt):
    text = render_text(tmp_path, DEBIAN + "components:\n  sshd: {}\n", fmt)
    for name in ("devel", "runtime"):
        part = stage(text, name)
        assert "openssh-client openssh-server" in part
        assert "rm -f /etc/ssh/ssh_host_*" in part
        assert "'PasswordAuthentication no'" in part and "> /etc/ssh/sshd_config.d/imagekit.conf" in part
        assert "mkdir -p /run/sshd" in part
    # Key removal runs after the install that generates them.
    devel = stage(text, "devel")
    assert devel.index("openssh-server") < devel.index("rm -f /etc/ssh/ssh_host_*")
    assert "ssh-keygen" not in text


def test_checks_guard_against_keys(tmp_path):
    checks = {c.id: c for c in load_text(tmp_path, DEBIAN + "components:\n  sshd: {}\n").get("sshd").checks()}
    assert checks["sshd.no_host_keys"].absent == "/etc/ssh/ssh_host_*"
    assert "/root/.ssh/id_*" in checks["sshd.no_user_keys"].absent
