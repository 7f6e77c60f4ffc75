"""Untrusted image metadata under the real Enroot and Pyxis: labels, Env and Volumes.

tests/export/test_untrusted_metadata.py runs the exported config files the way Enroot runs them,
in a chroot, for many generated values; here the reproducers run through the real thing, built
from source by scripts/setup-cluster.sh: `enroot create` + `enroot start` and `srun
--container-image` (Pyxis), as root and as the unprivileged user, with a host directory mounted
at /mnt that an injected command would write to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers.hostile import REPRODUCER

from imagekit.util import quoting
from imagekit.image_facts import reader
from imagekit.export import ExportRequest, export_image

pytestmark = [pytest.mark.engine, pytest.mark.slurm]
# Every character str.splitlines() ends a line at but sh does not (issue 22, F10).
SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.fixture
def shared_dir():
    """A directory root and the unprivileged user may both read (exports) and write (the proof mount)."""
    path = Path(tempfile.mkdtemp(prefix="imagekit-hostile-", dir="/var/tmp"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def exported(image: str, directory: Path, name: str) -> Path:
    out = Path(export_image(image, ExportRequest("enroot"), directory / name).path)
    os.chmod(out, 0o644)
    return out


def as_who(user, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if user is None:
        return subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd="/tmp",
                              timeout=300)
    return user.run(argv, env=env, timeout=300, stderr=subprocess.PIPE)


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])
def test_a_label_with_line_separators_runs_nothing_under_pyxis_or_enroot(cluster, test_user, make_image, shared_dir,
                                                                         as_user):
    """Issue 11's label `note harmless⏎echo INJECTED >> /mnt/proof` is refused at export now (it would
    read back changed, issue 22 F10); the same payload behind each character str.splitlines() breaks
    at and sh does not (U+2028, U+2029, U+0085, VT, FF, FS, GS, RS), started by Pyxis (with and without
    the entrypoint) and by enroot start with a host directory at /mnt, writes nothing there, and the
    labels read back from the .sqsh exactly."""
    user = test_user if as_user else None
    with pytest.raises(quoting.UnsafeValue, match="label 'note'"):
        exported(make_image("imagekit-test/hostile-label:1", Labels={"note": REPRODUCER}), shared_dir, "nl.sqsh")
    assert not (shared_dir / "nl.sqsh").exists()
    labels = {f"note{i}": REPRODUCER.replace("\n", sep) for i, sep in enumerate(SEPARATORS)}
    image = make_image("imagekit-test/hostile-label-separators:1", Labels=labels)
    sqsh = exported(image, shared_dir, "label.sqsh")
    assert reader.read(str(sqsh)).labels == labels
    proof = shared_dir / "proof"
    proof.mkdir(mode=0o777)
    os.chmod(proof, 0o777)
    env = {"SLURM_CONF": str(cluster.conf)}
    for extra in ([], ["--no-container-entrypoint"]):
        started = as_who(user, ["srun", f"--container-image={sqsh}", f"--container-mounts={proof}:/mnt", *extra,
                                "/bin/echo", "started"], env)
        assert started.returncode == 0 and started.stdout == "started\n", started.stdout + started.stderr
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    assert as_who(user, ["enroot", "create", "--name", name, str(sqsh)]).returncode == 0
    try:
        started = as_who(user, ["enroot", "start", "--mount", f"{proof}:/mnt", name, "/bin/echo", "started"])
        assert started.returncode == 0 and started.stdout == "started\n", started.stdout + started.stderr
    finally:
        as_who(user, ["enroot", "remove", "--force", name])
    assert list(proof.iterdir()) == [], "a label's second line ran as a command"


def test_hostile_entrypoint_cmd_env_and_workdir_reach_the_process_as_words(make_image, shared_dir):
    """Quotes, $(), backticks, ; and a newline in Entrypoint/Cmd, Env and WorkingDir: enroot start runs
    exactly the image's words, in its WORKDIR, with Env as Enroot reads it ($(...) stays text)."""
    payload = "it's \"$(touch /canary)\" `touch /canary`; touch /canary && x\nnext"
    show = 'printf "[%s]" "$@"; printf "|%s|%s|" "$NOTE" "$PWD"; if [ -e /canary ]; then echo CANARY; fi'
    image = make_image("imagekit-test/hostile-config:1", Entrypoint=["/bin/sh", "-c", show, "sh"],
                       Cmd=[payload, "-rf", "#"], Env=["PATH=/usr/bin:/bin", "NOTE=$(touch /canary) `x`; y"],
                       WorkingDir="/work $(x) `y`")
    sqsh = exported(image, shared_dir, "config.sqsh")
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    assert subprocess.run(["enroot", "create", "--name", name, str(sqsh)], capture_output=True).returncode == 0
    try:
        run = subprocess.run(["enroot", "start", "--rw", name], capture_output=True, text=True, cwd="/tmp")
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"[{payload}][-rf][#]|$(touch /canary) `x`; y|/work $(x) `y`|", run.stdout
    finally:
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)


def test_a_volume_through_an_image_symlink_is_refused(base_image, shared_dir, docker_bin):
    """F9: `/data -> /a/host/dir` in the image and `VOLUME /data`. Enroot binds `${ENROOT_ROOTFS}/data`,
    and mount(2) follows the image's symlink on the host: `enroot import`'s own file shows the host
    directory inside the container. imagekit refuses to export the image, naming the Volume."""
    secret = shared_dir / "host-secret"
    secret.mkdir()
    (secret / "SECRET").write_text("host-only file\n")
    tag = "imagekit-test/volume-symlink:1"
    proc = subprocess.run([docker_bin, "build", "-q", "-t", tag, "-"], text=True, capture_output=True,
                          input=f"FROM {base_image}\nRUN ln -s {secret} /data\nVOLUME /data\n",
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    # The hazard, through Enroot's own converter.
    theirs = shared_dir / "theirs.sqsh"
    imported = subprocess.run(["enroot", "import", "-o", str(theirs), f"dockerd://{tag}"], capture_output=True,
                              text=True, cwd="/tmp")
    assert imported.returncode == 0, imported.stderr
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    assert subprocess.run(["enroot", "create", "--name", name, str(theirs)], capture_output=True).returncode == 0
    try:
        leak = subprocess.run(["enroot", "start", name, "cat", "/data/SECRET"], capture_output=True, text=True,
                              cwd="/tmp")
        assert leak.stdout == "host-only file\n", leak.stdout + leak.stderr
    finally:
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)
    # imagekit's export: refused before anything is written.
    ours = shared_dir / "ours"
    ours.mkdir()
    with pytest.raises(quoting.UnsafeValue, match=r"Volume '/data' goes through /data, a symlink in the image") as err:
        export_image(tag, ExportRequest("enroot"), ours / "x.sqsh")
    assert "host path" in err.value.hint
    assert list(ours.iterdir()) == []


# ---------------------------------------------------------------- issue 22: F17, F18, F19 under Enroot


def _build(docker_bin: str, tag: str, dockerfile: str, context: Path | None = None) -> str:
    proc = subprocess.run([docker_bin, "build", "-q", "-t", tag, str(context) if context else "-"], text=True,
                          capture_output=True, input=None if context else dockerfile,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    return tag


def _enroot_run(sqsh: Path, *argv: str) -> subprocess.CompletedProcess:
    """`enroot create` + `enroot start` of ``sqsh`` (removed after), running ``argv``."""
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["enroot", "create", "--name", name, str(sqsh)], capture_output=True, text=True, cwd="/tmp")
    assert made.returncode == 0, made.stderr
    try:
        return subprocess.run(["enroot", "start", name, *argv], capture_output=True, text=True, cwd="/tmp",
                              timeout=120)
    finally:
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)


def _enroot_import(tag: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["enroot", "import", "-o", str(out), f"dockerd://{tag}"], capture_output=True, text=True,
                          cwd="/tmp", timeout=600)


def test_hard_links_to_what_enroot_regenerates_or_drops_end_as_in_enroot(base_image, docker_bin, shared_dir):
    """F18. The image's /etc/rc has a second name, /usr/start.sh: Enroot writes its /etc/rc in place, so
    /usr/start.sh is Enroot's script; in imagekit's export it is imagekit's /etc/rc, the same file.
    /usr/helper, a second name of /dev/shm-helper: Enroot extracts no dev/*, so tar cannot make the
    link and `enroot import` fails; imagekit refuses, naming both, and writes nothing."""
    context = shared_dir / "ctx"
    (context / "rootfs/etc").mkdir(parents=True)
    (context / "rootfs/usr").mkdir()
    (context / "rootfs/etc/rc").write_text("echo IMAGE-RC\n")
    os.link(context / "rootfs/etc/rc", context / "rootfs/usr/start.sh")
    (context / "Dockerfile").write_text(f"FROM {base_image}\nCOPY rootfs/ /\n")
    tag = _build(docker_bin, "imagekit-test/hardlink-rc:1", "", context)
    theirs = shared_dir / "theirs.sqsh"
    assert _enroot_import(tag, theirs).returncode == 0
    ours = exported(tag, shared_dir, "ours.sqsh")
    show = ["sh", "-c", "stat -c %i /etc/rc /usr/start.sh | uniq | wc -l; cmp /etc/rc /usr/start.sh && head -c 8 /usr/start.sh"]
    for sqsh in (theirs, ours):
        run = _enroot_run(sqsh, *show)
        assert run.returncode == 0 and run.stdout.startswith("1\n"), (sqsh.name, run.stdout, run.stderr)
        assert "IMAGE-RC" not in run.stdout
    assert _enroot_run(ours, "cat", "/usr/start.sh").stdout == _enroot_run(ours, "cat", "/etc/rc").stdout

    (context / "rootfs/dev").mkdir()
    (context / "rootfs/dev/shm-helper").write_text("helper\n")
    os.link(context / "rootfs/dev/shm-helper", context / "rootfs/usr/helper")
    tag = _build(docker_bin, "imagekit-test/hardlink-dev:1", "", context)
    failed = _enroot_import(tag, shared_dir / "theirs-dev.sqsh")
    assert failed.returncode != 0 and "Cannot hard link" in failed.stderr, failed.stderr
    out = shared_dir / "ours-dev"
    out.mkdir()
    with pytest.raises(quoting.UnsafeValue, match=rf"^image {tag}: file '/usr/helper' is a hard link to "
                                                  r"/dev/shm-helper, which Enroot leaves out"):
        export_image(tag, ExportRequest("enroot"), out / "x.sqsh", store=False)
    assert list(out.iterdir()) == []


def test_an_entrypoint_starting_with_a_dash_is_refused(base_image, docker_bin, shared_dir):
    """F19. Entrypoint ["-a", "FAKE", "/bin/sh", "-c", ...]: Enroot's own /etc/rc runs `exec '-a' 'FAKE' ...`,
    and bash (Enroot runs /etc/rc with $SHELL) takes -a as its exec's option: argv0 becomes FAKE. Docker
    would look for a program named "-a". imagekit's export refuses it, naming the image and the field."""
    tag = _build(docker_bin, "imagekit-test/dash-entrypoint:1",
                 f'FROM {base_image}\nENTRYPOINT ["-a", "FAKE", "/bin/sh", "-c", "echo argv0=$0"]\n')
    theirs = shared_dir / "theirs.sqsh"
    assert _enroot_import(tag, theirs).returncode == 0
    name = f"imagekit-test-{uuid.uuid4().hex[:8]}"
    assert subprocess.run(["enroot", "create", "--name", name, str(theirs)], capture_output=True).returncode == 0
    try:
        run = subprocess.run(["enroot", "start", name], capture_output=True, text=True, cwd="/tmp",
                             env={**os.environ, "SHELL": "/bin/bash"})
        assert run.stdout == "argv0=FAKE\n", run.stdout + run.stderr   # the hazard, in Enroot's own file
    finally:
        subprocess.run(["enroot", "remove", "--force", name], capture_output=True)
    out = shared_dir / "ours"
    out.mkdir()
    with pytest.raises(quoting.UnsafeValue, match=rf"^image {tag}: Entrypoint\[0\] '-a' starts with '-'"):
        export_image(tag, ExportRequest("enroot"), out / "x.sqsh", store=False)
    assert list(out.iterdir()) == []


def test_an_alias_of_etc_rc_or_fstab_never_reaches_enroot(base_image, docker_bin, shared_dir, monkeypatch):
    """F17. A real root filesystem (the base image's `docker export`) behind members named `etc//fstab`
    (a host bind of /), `../etc/rc` and `etc/./environment`, as an exporter other than Docker could
    write them: the squashfs tools would keep these first copies; imagekit's filter drops them, and
    the container Enroot starts has imagekit's files (the entrypoint runs, /host is no mount)."""
    import io
    import tarfile

    from imagekit.engines import docker as engine
    from imagekit.export import image_source

    cid = subprocess.run([docker_bin, "create", base_image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        rootfs = subprocess.run([docker_bin, "export", cid], capture_output=True, check=True).stdout
    finally:
        subprocess.run([docker_bin, "rm", "-f", cid], capture_output=True)
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in (("etc//fstab", b"/ /host none x-create=dir,rbind,rw\n"),
                           ("../etc/rc", b"echo HOSTILE-RC\n"), ("etc/./environment", b"HOSTILE=1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        members_end = t.offset
    # The hostile members first (the tools keep the first of two names), then the image: no end marker between.
    stream = shared_dir / "image.tar"
    stream.write_bytes(hostile.getvalue()[:members_end] + rootfs)
    config = {"Entrypoint": ["/bin/sh", "-c", 'echo "env=${HOSTILE:-none}"; test -d /host && echo HOST-BOUND; :']}
    # The engine's `docker export` stream, as its socket gives it (engine.exported), is that file.
    monkeypatch.setattr(engine, "exported", lambda image, purpose="export": open(stream, "rb"))
    monkeypatch.setattr(image_source.EngineSource, "inspect", lambda self: {"Config": config, "Size": len(rootfs)})
    from imagekit.export import enroot

    sqsh = Path(enroot.convert("hostile-names:1", shared_dir / "aliases.sqsh", ExportRequest("enroot")).path)
    os.chmod(sqsh, 0o644)
    run = _enroot_run(sqsh)
    assert run.returncode == 0 and run.stdout == "env=none\n", run.stdout + run.stderr
