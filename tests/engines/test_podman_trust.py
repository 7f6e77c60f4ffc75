"""Rootless Podman's store and configuration, attacked by another user (issue 49's untried surface).

The victim is the real rootless Podman user (``imagekit-user``, scripts/setup-podman.sh) in a Podman
environment of its own made for each test (HOME, runtime directory, store: its real store is never
touched); the attackers are real numeric users (ALICE, in group TEAM: helpers/users.py). Each case is
a path another user can create or change before the victim's imagekit runs podman:

- the store: a graph root in a sticky shared directory (``rootless_storage_path = "/tmp/…-$UID"``,
  as sites set it for a home on NFS) that ALICE made first, or where she planted a link; a run root
  there. Podman uses them as they are. With the graph root
  hers, ALICE sets the victim's image records aside for her own: the victim's ``NAME`` gets her
  config (entrypoint, environment) over the victim's own layer, which the export carried into
  ``/etc/rc``, and a signature with it;
- the configuration: a ``containers.conf`` another user can write (through ``$XDG_CONFIG_HOME``, a
  group-writable ``~/.config/containers``, ``$CONTAINERS_CONF``; root too) names her program as
  ``conmon``, which Podman 4.3 runs at the start of every command: her program ran as the victim,
  and as root.

Before: each of these ran. Now each is one refusal naming the path, before podman runs with it (or,
for a graph root only podman can place, before any image is read), and ALICE's program never runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.podman_user import PodmanUser, user  # noqa: F401 - the fixture
from helpers.users import ALICE, TEAM, other_python, setpriv  # noqa: F401 - the fixture (user needs it)

pytestmark = pytest.mark.engine

IMAGE = "localhost/ik-trust-victim:1"
# ALICE's program, named as conmon: it leaves a file saying who ran it (in the user namespace, 0 is the victim).
EVIL = "#!/bin/sh\ntouch {marks}/ran-as-uid-$(id -u)-$$\n"
# ALICE, owning the graph root: the victim's image records set aside for hers, whose config is her own
# over the victim's layer (a layer's ID is its diff ID: a public base's layers are known to everyone).
FORGE = r'''
import base64, hashlib, json, os, sys
graph, name, layer_tar = sys.argv[1:4]
diff = "sha256:" + hashlib.sha256(open(layer_tar, "rb").read()).hexdigest()
config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff]},
                     "config": {"Entrypoint": ["/bin/sh", "-c", "echo alice was here"]}}).encode()
cdig = "sha256:" + hashlib.sha256(config).hexdigest()
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": diff,
                "size": os.path.getsize(layer_tar)}]}).encode()
mdig = "sha256:" + hashlib.sha256(manifest).hexdigest()
images = os.path.join(graph, "overlay-images")
os.rename(images, images + ".victim")
os.makedirs(os.path.join(images, cdig[7:]))
big = {cdig: config, "manifest-" + mdig: manifest, "manifest": manifest}
for key, data in big.items():           # containers/storage's file name for a key: plain, or "=" and base64
    plain = all(c.isalnum() or c in "-_." for c in key)
    with open(os.path.join(images, cdig[7:], key if plain else "=" + base64.b64encode(key.encode()).decode()), "wb") as f:
        f.write(data)
entry = {"id": cdig[7:], "digest": mdig, "names": [name], "layer": diff[7:], "big-data-names": list(big),
         "big-data-sizes": {k: len(v) for k, v in big.items()},
         "big-data-digests": {k: "sha256:" + hashlib.sha256(v).hexdigest() for k, v in big.items()}}
with open(os.path.join(images, "images.json"), "w") as f:
    json.dump([entry], f)
os.system("chmod -R a+rwX " + images)
'''


class Victim:
    """``imagekit-user`` with a Podman environment of its own below ``root``: HOME, XDG_RUNTIME_DIR,
    ``~/.config/containers/storage.conf``; ``shared`` is a sticky directory everyone may write (/tmp)."""

    def __init__(self, user: PodmanUser, root: Path) -> None:
        self.user, self.root = user, root
        self.home, self.run_dir, self.shared = root / "home", root / "run", root / "shared"
        self.config, self.out = self.home / ".config" / "containers", root / "out"
        for d in (self.home, self.home / ".config", self.config, self.run_dir, self.out):
            d.mkdir(mode=0o700)
            os.chown(d, user.uid, user.uid)
        self.shared.mkdir()
        self.shared.chmod(0o1777)
        self.env = {"HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.run_dir)}

    def storage_conf(self, text: str) -> None:
        path = self.config / "storage.conf"
        path.write_text('[storage]\ndriver = "overlay"\n' + text)
        os.chown(path, self.user.uid, self.user.uid)

    def podman(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.user.podman(*args, env={**self.env, **(env or {})})

    def imagekit(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.user.imagekit(*args, env={**self.env, "IMAGEKIT_STORE": str(self.root / "store"), **(env or {})})

    def export(self, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
        out = self.out / "victim.sqsh"
        return self.imagekit("export", f"containers-storage:{IMAGE}", "--to", "enroot", "-o", str(out), env=env), out

    def close(self) -> None:
        """End the pause process this environment's podman left (by the PID it wrote), then remove it all."""
        pid_file = self.run_dir / "libpod" / "tmp" / "pause.pid"
        if pid_file.is_file():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def victim(user):
    root = Path(tempfile.mkdtemp(prefix="imagekit-podman-trust-", dir="/var/tmp"))
    root.chmod(0o755)
    v = Victim(user, root)
    yield v
    v.close()


def as_alice(argv: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(setpriv(ALICE, argv, groups=(TEAM,)), capture_output=True, text=True, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


def one_refusal(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, an error and its fix (two lines), naming what ``fragments`` say."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "is not a shared mount" not in line]
    assert len(lines) == 2 and lines[0].startswith("imagekit: error: ") and lines[1].strip().startswith("fix: "), lines
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


def _made_first(victim: Victim, path: Path) -> None:
    as_alice(["mkdir", "-m", "777", str(path)])


def _link_planted(victim: Victim, path: Path) -> None:
    """A link to a directory of the victim's own: Podman follows it, and ALICE can point it elsewhere later."""
    own = victim.home / "data"
    own.mkdir(mode=0o700)
    os.chown(own, victim.user.uid, victim.user.uid)
    as_alice(["ln", "-s", str(own), str(path)])


FORMS = {"basic": '"{}"', "literal": "'{}'", "escaped": '"{}"'}     # escaped: "-" written \u002D


@pytest.mark.parametrize("plant, form", [(_made_first, "basic"), (_made_first, "literal"), (_made_first, "escaped"),
                                         (_link_planted, "basic"), (_link_planted, "literal")],
                         ids=["made-first", "made-first-literal", "made-first-escaped", "a-link", "a-link-literal"])
def test_a_graph_root_another_user_made_first_is_refused_and_her_image_never_exported(victim, plant, form):
    """``rootless_storage_path`` in a sticky shared directory, the name taken by ALICE. A plain TOML
    string is read before podman runs: nothing is made in her directory. One imagekit does not read
    (an escape) only Podman places: refused on Podman's own word, before any image is read. (A link
    there is judged by where it leads when Podman answers: to the victim's own directory, it is used.)"""
    graph = victim.shared / f"graph-{victim.user.uid}"
    value = f"{victim.shared}/graph-$UID".replace("-", "\\u002D") if form == "escaped" else f"{victim.shared}/graph-$UID"
    victim.storage_conf(f"rootless_storage_path = {FORMS[form].format(value)}\n")
    plant(victim, graph)
    proc, out = victim.export()
    one_refusal(proc, f"Podman's graph root (its images and layers) {graph}", f"belongs to {ALICE}",
                "have an admin remove it")
    if form != "escaped":
        assert os.listdir(graph) == [], "podman made its store in the other user's directory"
    if plant is _made_first:
        # The attack, for real: the victim's own podman stores an image there; ALICE gives its name her config.
        layer = victim.user.dir("layer")
        (layer / "hello").write_text("the victim's\n")
        tar = victim.root / "public-layer.tar"
        subprocess.run(["tar", "-C", str(layer), "-cf", str(tar), "."], check=True)
        tar.chmod(0o644)
        imported = victim.podman("import", "-q", str(tar), IMAGE)
        assert imported.returncode == 0, imported.stderr
        as_alice(["/usr/bin/python3", "-c", FORGE, str(graph), IMAGE, str(tar)])
        seen = victim.podman("image", "inspect", "--format", "{{.Config.Entrypoint}}", IMAGE)
        assert "alice was here" in seen.stdout, seen.stdout + seen.stderr      # podman gives her image
        proc, out = victim.export()
        one_refusal(proc, f"{graph} belongs to {ALICE}")
    assert not out.exists()


def test_a_run_root_another_user_made_first_is_refused_before_podman_runs(victim):
    """``runroot`` in a shared directory (the store's locks, its layers' mount records), made first by
    ALICE. (``XDG_RUNTIME_DIR`` set to a directory that is not the user's: Podman 4.3 refuses it itself.)"""
    run = victim.shared / f"run-{victim.user.uid}"
    victim.storage_conf(f'runroot = "{run}"\n')
    as_alice(["mkdir", "-m", "777", str(run)])
    proc, _ = victim.export()
    one_refusal(proc, f"Podman's run root {run} belongs to {ALICE}")
    assert os.listdir(run) == [], "podman used the other user's directory"


def alices_program(victim: Victim) -> tuple[Path, Path]:
    """(the directory it leaves its marks in, ALICE's program)."""
    marks, evil = victim.shared / "alice-marks", victim.shared / "evil.sh"
    as_alice(["mkdir", "-m", "777", str(marks)])       # not sticky: anyone's program may leave a file there
    as_alice(["sh", "-c", f"cat > {evil} && chmod 755 {evil}"], input=EVIL.format(marks=marks))
    return marks, evil


def ran(marks: Path) -> list[str]:
    return sorted(os.listdir(marks))


def _xdg_config_home_of_alice(victim: Victim, conf: str) -> tuple[dict, str]:
    shared = victim.shared / "alice-config"
    as_alice(["mkdir", "-p", "-m", "755", str(shared / "containers")])
    as_alice(["sh", "-c", f"cat > {shared}/containers/containers.conf"], input=conf)
    return {"XDG_CONFIG_HOME": str(shared)}, f"{shared} belongs to {ALICE}"


def _group_writable_user_config(victim: Victim, conf: str) -> tuple[dict, str]:
    """The victim's own ~/.config/containers, group-writable by a team ALICE is in (homes 0755)."""
    for d in (victim.home, victim.home / ".config"):
        d.chmod(0o755)
    os.chown(victim.config, victim.user.uid, TEAM)
    victim.config.chmod(0o775)
    as_alice(["sh", "-c", f"cat > {victim.config}/containers.conf"], input=conf)
    return {}, f"Podman configuration directory {victim.config} is writable by its group"


def _containers_conf_of_alice(victim: Victim, conf: str) -> tuple[dict, str]:
    path = victim.shared / "alice-containers.conf"
    as_alice(["sh", "-c", f"cat > {path}"], input=conf)
    return {"CONTAINERS_CONF": str(path)}, f"Podman configuration ($CONTAINERS_CONF) {path} belongs to {ALICE}"


@pytest.mark.parametrize("plant", [_xdg_config_home_of_alice, _group_writable_user_config, _containers_conf_of_alice],
                         ids=["XDG_CONFIG_HOME", "group-writable-config", "CONTAINERS_CONF"])
def test_podman_configuration_another_user_can_change_never_runs_her_program(victim, plant):
    marks, evil = alices_program(victim)
    env, said = plant(victim, f'[engine]\nconmon_path = ["{evil}"]\n')
    proc, _ = victim.export(env=env)
    one_refusal(proc, said)
    assert ran(marks) == [], f"ALICE's program ran: {ran(marks)}"


def test_root_runs_no_podman_with_a_containers_conf_another_user_can_change(victim):
    """Root with ``CONTAINERS_CONF`` naming ALICE's file (a CI template's variable, a shared profile): her
    program would run as root at root's first podman command. (The store is a scratch one of root's, so
    that even the code before this fix, which ran podman, left root's own store alone.)"""
    marks, evil = alices_program(victim)
    scratch = victim.root / "root-store"
    scratch.mkdir(mode=0o700)
    conf = victim.shared / "alice-containers.conf"
    as_alice(["sh", "-c", f"cat > {conf}"], input=f'[engine]\nconmon_path = ["{evil}"]\ntmp_dir = "{scratch}/tmp"\n'
                                                  f'static_dir = "{scratch}/static"\nvolume_path = "{scratch}/volumes"\n')
    storage = scratch / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{scratch}/graph"\nrunroot = "{scratch}/run"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", f"containers-storage:{IMAGE}",
                           "--to", "enroot", "-o", str(scratch / "out.sqsh")], capture_output=True, text=True,
                          env=env, cwd=scratch, timeout=300)
    one_refusal(proc, f"Podman configuration ($CONTAINERS_CONF) {conf} belongs to {ALICE}")
    assert ran(marks) == [], f"ALICE's program ran: {ran(marks)}"


def test_root_never_uses_a_store_another_user_owns(victim):
    """Root's podman told (by a storage.conf of root's) to use a graph root that is ALICE's (her own rootless
    store, say): root would read her image records and make its directories, as root, where her links
    lead. Refused before podman runs; nothing is made in her directory."""
    scratch = victim.root / "root-store"
    scratch.mkdir(mode=0o700)
    graph = victim.shared / "alice-store"
    as_alice(["mkdir", "-m", "755", str(graph)])
    storage, conf = scratch / "storage.conf", scratch / "containers.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{graph}"\nrunroot = "{scratch}/run"\n')
    conf.write_text(f'[engine]\ntmp_dir = "{scratch}/tmp"\n')      # root's own libpod state stays in the scratch
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}
    proc = subprocess.run([sys.executable, "-m", "imagekit", "export", f"containers-storage:{IMAGE}",
                           "--to", "enroot", "-o", str(scratch / "out.sqsh")], capture_output=True, text=True,
                          env=env, cwd=scratch, timeout=300)
    one_refusal(proc, f"Podman's graph root (its images and layers) {graph} belongs to {ALICE}")
    assert os.listdir(graph) == []
