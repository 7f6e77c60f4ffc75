"""PXS3-2 (issue 34): the Pyxis importer honours the site's Enroot configuration, under the real Pyxis.

A plain-HTTP registry on this machine's non-loopback address (the loopback exception every other
test has hides the problem), and the same registry with HTTP Basic auth. Pyxis strips
``ENROOT_ALLOW_HTTP`` from what it gives the importer, and a site sets ``ENROOT_CONFIG_PATH`` (the
credentials file) in Enroot's configuration: the importer reads ``enroot.conf.d`` as ``enroot
import`` does. Each step runs Enroot's own import beside it, so the two agree:

- no configuration: Enroot and the importer both refuse (TLS to a plain-HTTP registry); the
  importer's error is one line, with the whole OpenSSL reason and its fix (PXS3-5);
- ``ENROOT_ALLOW_HTTP yes`` in a drop-in: both pull, the importer for root and for the test user
  (root's conversion goes straight to the registry: the Docker engine would not speak plain HTTP
  to a non-loopback registry);
- ``ENROOT_CONFIG_PATH /…/$(id -u)`` too, with each user's credentials file there: both pull from
  the registry that asks for a login (the value goes through the shell, as Enroot's does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from imagekit.export import stage
from helpers.enroot_conf import drop_in
from helpers.local_registry import htpasswd_config, running_registry
from helpers.pyxis_standins import build_all, push_all

pytestmark = [pytest.mark.engine, pytest.mark.slurm]

IMAGE = "ubuntu:24.04"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def host_address() -> str:
    """The first IPv4 address of this machine outside loopback."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                         text=True).stdout.split()
    addresses = [out[i + 1].split("/")[0] for i, word in enumerate(out) if word == "inet"]
    if not addresses:
        pytest.fail("this machine has no non-loopback IPv4 address to serve a registry on")
    return addresses[0]


@pytest.fixture(scope="module")
def site(cluster, base_image, other_python, test_user):
    directory = Path(tempfile.mkdtemp(prefix="imagekit-site-conf-", dir="/var/tmp"))
    os.chmod(directory, 0o755)
    log = directory / "importer.log"
    log.touch()
    log.chmod(0o666)
    for who, owner in (("root", (0, 0)), ("user", (test_user.uid, test_user.gid))):
        for sub in ("cache", "cwd", f"enroot-config/{owner[0]}"):
            path = directory / (f"{sub}-{who}" if "/" not in sub else sub)
            path.mkdir(parents=True, mode=0o700)
            os.chown(path, *owner)
        creds = directory / f"enroot-config/{owner[0]}/.credentials"
        creds.write_text("")       # filled in by the test, once the address is known
        creds.chmod(0o600)
        os.chown(creds, *owner)
    os.chmod(directory / "enroot-config", 0o755)
    storage = directory / "registry"
    tag = build_all(base_image)[IMAGE]
    address = host_address()
    try:
        with running_registry(storage) as loopback, \
                running_registry(storage, host=address) as plain, \
                running_registry(storage, extra_config=htpasswd_config(directory / "auth", {"alice": "s3cret"}),
                                 host=address) as guarded:
            push_all({IMAGE: tag}, loopback)
            for creds in (directory / "enroot-config").glob("*/.credentials"):
                creds.write_text(f"machine {address} login alice password s3cret\n")
            cluster.pyxis(importer=str(other_python.importer(directory, {}, log)))
            yield {"dir": directory, "plain": plain, "guarded": guarded, "log": log, "cluster": cluster,
                   "user": test_user}
    finally:
        cluster.pyxis()
        shutil.rmtree(directory, ignore_errors=True)


def srun(site, user, image: str) -> subprocess.CompletedProcess:
    who = "user" if user else "root"
    env = {"PATH": PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(site["cluster"].conf),
           "XDG_CACHE_HOME": str(site["dir"] / f"cache-{who}")}
    argv = ["srun", f"--container-image={image}", "grep", "-c", "Ubuntu 24.04", "/etc/os-release"]
    if user is None:
        return subprocess.run(["env", "-i", "HOME=/root", *(f"{k}={v}" for k, v in env.items()), *argv],
                              cwd=site["dir"] / "cwd-root", capture_output=True, text=True, timeout=600)
    return user.run(["env", "-i", f"HOME={user.home}", *(f"{k}={v}" for k, v in env.items()), *argv],
                    cwd=site["dir"] / "cwd-user", timeout=600, stderr=subprocess.PIPE)


def enroot_import(site, image: str) -> subprocess.CompletedProcess:
    """Enroot's own import as root, the command Pyxis runs without an importer."""
    out = site["dir"] / "cwd-root" / "native.sqsh"
    out.unlink(missing_ok=True)
    return subprocess.run(["enroot", "import", "-o", str(out), f"docker://{image}"], capture_output=True,
                          text=True, timeout=600, env={"PATH": PATH, "HOME": "/root"})


def test_without_the_sites_configuration_both_refuse_and_the_error_is_one_whole_line(site):
    image = f"{site['plain']}#{IMAGE}"
    assert enroot_import(site, image).returncode != 0
    proc = srun(site, None, image)
    assert proc.returncode != 0, proc.stdout
    errors = [line for line in proc.stderr.splitlines() if f"imagekit-pyxis-importer on {stage.host()}: error:" in line]
    assert len(errors) == 1, proc.stderr
    (line,) = errors
    assert f"TLS failed talking to {site['plain']}: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:" in line
    assert line.split("(_ssl.c:", 1)[1].split(")", 1)[0].isdigit(), line
    assert "(fix: for a plain-HTTP registry set IMAGEKIT_INSECURE_REGISTRIES=" in line and "enroot.conf" in line
    assert not any(l.strip().startswith("pyxis:       fix:") for l in proc.stderr.splitlines()), proc.stderr


def test_enroot_allow_http_in_a_drop_in_lets_the_importer_pull_as_it_lets_enroot(site):
    image = f"{site['plain']}#{IMAGE}"
    with drop_in("ENROOT_ALLOW_HTTP yes\n", "allow-http"):
        native = enroot_import(site, image)
        assert native.returncode == 0, native.stderr
        for user in (None, site["user"]):
            proc = srun(site, user, image)
            assert proc.returncode == 0 and proc.stdout.strip().endswith("1"), \
                f"{user}: {proc.stdout}{proc.stderr}{site['log'].read_text()[-2000:]}"
    said = site["log"].read_text()
    assert "into the Docker engine" not in said and "straight from the registry" in said, said


def test_enroot_config_path_in_a_drop_in_gives_the_importer_enroots_credentials(site):
    image = f"{site['guarded']}#{IMAGE}"
    with drop_in("ENROOT_ALLOW_HTTP yes\n", "allow-http"):
        refused = srun(site, None, image)
        assert refused.returncode != 0 and "credentials" in refused.stderr.lower(), refused.stderr
        config = f"ENROOT_CONFIG_PATH {site['dir']}/enroot-config/$(id -u)\n"
        with drop_in(config, "config-path"):
            native = enroot_import(site, image)
            assert native.returncode == 0, native.stderr
            for user in (None, site["user"]):
                proc = srun(site, user, image)
                assert proc.returncode == 0 and proc.stdout.strip().endswith("1"), \
                    f"{user}: {proc.stdout}{proc.stderr}{site['log'].read_text()[-2000:]}"
