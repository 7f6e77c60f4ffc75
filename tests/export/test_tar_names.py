"""Member names and hard links in the export's tar filter (issue 22, F17 and F18).

F17: the filter compared a member's raw name with the files Enroot regenerates, while the squashfs
tools file it under a canonical one (leading "/", "./" and "../" skipped, "//" joined) and keep the
first of two members with one name: ``etc//rc`` or ``../etc/fstab`` put the image's own /etc/rc or
/etc/fstab (whose lines Enroot mounts from the host) in place of imagekit's. ``docker export`` writes
clean names, so such a tar comes from another exporter (``IMAGEKIT_DOCKER``); it is fed here through
``enroot.convert`` itself, with ``docker export`` swapped for ``cat`` of the tar, into each squashfs
tool. F18: a hard link whose first name the filter drops (Docker writes the first name of a file
with several as the regular member) disappeared from the export. Enroot (``enroot import
dockerd://``, which the runtime tests run) rewrites /etc/rc, /etc/fstab, ... in place, so their other
names show the new content; its extraction skips dev/* and /.dockerenv, and tar then fails to make a
link to them, so its import fails. The export does the same: a link to a regenerated file, or a
refusal naming the image and both names, with nothing written.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from imagekit.util import login_env, quoting
from imagekit.engines import docker as engine
from imagekit.export import ExportRequest, enroot, image_source, squash, tarstream

HOSTILE = b"echo HOSTILE\n"
CONFIG = {"Entrypoint": ["/bin/echo", "started"], "Labels": {"io.example": "1"}}
TOOLS = squash.TOOLS


def member(name: str, data: bytes = b"", *, typ: bytes = tarfile.REGTYPE, link: str = "",
           pax: dict[str, str] | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = typ, link, len(data), 0o644
    info.pax_headers = dict(pax or {})
    return info, data


def tar(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for d in ("etc", "usr", "dev", "etc/profile.d"):
            t.addfile(member(d + "/", typ=tarfile.DIRTYPE)[0])
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


@pytest.fixture
def export_tar(monkeypatch, tmp_path):
    """``export_tar(tar_bytes, tool)``: ``enroot.convert`` of an image whose ``docker export`` is that
    tar; returns the .sqsh path."""
    def run(data: bytes, tool: str = "auto", image: str = "hostile:1") -> Path:
        source = tmp_path / "image.tar"
        source.write_bytes(data)
        # The engine's `docker export` stream, as its socket gives it (engine.exported), is that tar.
        monkeypatch.setattr(engine, "exported", lambda image, purpose="export": open(source, "rb"))
        monkeypatch.setattr(image_source.EngineSource, "inspect", lambda self: {"Config": CONFIG, "Size": len(data)})
        out = tmp_path / "out" / f"{tool}.sqsh"
        out.parent.mkdir(exist_ok=True)
        # sqfstar misreads -X compressor options: it gets Enroot's own preset (none).
        request = ExportRequest("enroot", tool=tool, preset="enroot" if tool == "sqfstar" else None, force=True)
        return Path(enroot.convert(image, out, request).path)
    return run


def cat(sqsh: Path, path: str) -> bytes:
    proc = subprocess.run(["unsquashfs", "-cat", str(sqsh), path], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def unpacked(sqsh: Path, where: Path) -> Path:
    subprocess.run(["unsquashfs", "-quiet", "-no-progress", "-d", str(where), str(sqsh)], check=True,
                   capture_output=True)
    return where


OURS = {path: quoting.encode(text) for path, text in enroot.config_files(CONFIG, "hostile:1").items()}


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("case", [
    [member("etc//rc", HOSTILE)],
    [member("./etc/./fstab", b"/ /host none x-create=dir,rbind,rw\n")],
    [member("../etc/environment", b"LD_PRELOAD=/host/x.so\n")],
    [member("/./../etc/rc.local", HOSTILE)],
    [member(f"./{login_env.PATH}/.", HOSTILE)],
    [member("usr/x", HOSTILE, pax={"path": "etc//rc"})],                    # the pax name wins
    [member("usr/x", HOSTILE, pax={"path": "usr/x", "GNU.sparse.name": "etc/fstab"})],   # a tool may take this one
    [member("etc/" + "/" * 120 + "rc", HOSTILE)],                             # a GNU long name
], ids=["dbl-slash", "dot", "leading-dotdot", "mixed-lead", "profile-d", "pax-path", "sparse-name", "gnu-long"])
def test_an_alias_of_a_regenerated_file_never_replaces_it(export_tar, tool, case):
    fmt = tarfile.GNU_FORMAT if case[0][0].name.count("/") > 100 else tarfile.PAX_FORMAT
    sqsh = export_tar(tar(*case, fmt=fmt), tool)
    for path, text in OURS.items():
        assert cat(sqsh, path) == text, path


@pytest.mark.parametrize("name,canonical", [
    ("etc/rc", "etc/rc"), ("./etc/rc", "etc/rc"), ("/etc/rc", "etc/rc"), ("etc//rc", "etc/rc"),
    ("etc/./rc", "etc/rc"), ("etc/rc/", "etc/rc"), ("etc/rc/.", "etc/rc"), ("../etc/rc", "etc/rc"),
    ("./../../etc/rc", "etc/rc"), ("/./../etc//rc", "etc/rc"), ("./", ""), ("usr/../etc/rc", "usr/../etc/rc"),
    ("a/b/../c", "a/b/../c"), ("...", "..."), ("a/.b", "a/.b"),
])
def test_names_are_compared_as_the_squashfs_tools_file_them(name, canonical):
    """Leading "/", "./" and "../" skipped and "//" joined, as sqfstar and mksquashfs -tar do; a ".."
    further in stays (sqfstar fails on it, tar2sqfs skips the member)."""
    assert tarstream.normalise(name) == canonical


@pytest.mark.parametrize("tool", TOOLS)
def test_a_hard_link_to_a_regenerated_file_links_to_the_new_one(export_tar, tmp_path, tool):
    """F18, as Enroot ends: /usr/start.sh, a second name of the image's /etc/rc, is the export's /etc/rc."""
    sqsh = export_tar(tar(member("etc/rc", HOSTILE),
                          member("usr/start.sh", typ=tarfile.LNKTYPE, link="etc/rc"),
                          member("etc/fstab", b"/ /host none x-create=dir,rbind,rw\n"),
                          member("usr/fstab.bak", typ=tarfile.LNKTYPE, link="./etc/fstab")), tool)
    assert cat(sqsh, "usr/start.sh") == cat(sqsh, "etc/rc") == OURS["etc/rc"]
    assert cat(sqsh, "usr/fstab.bak") == cat(sqsh, "etc/fstab") == OURS["etc/fstab"]
    tree = unpacked(sqsh, tmp_path / "tree")   # one file, two names, as Enroot's in-place rewrite leaves it
    assert (tree / "usr/start.sh").stat().st_ino == (tree / "etc/rc").stat().st_ino


@pytest.mark.parametrize("first", ["dev/shm-helper", ".dockerenv"])
def test_a_hard_link_to_what_enroot_leaves_out_is_refused_naming_both(export_tar, tmp_path, first):
    """F18, as Enroot ends: its import fails (tar cannot link to a file it did not extract); the
    export refuses, naming the image and both names, and writes nothing."""
    data = tar(member(first, b"helper\n"), member("usr/helper", typ=tarfile.LNKTYPE, link=first),
               member("usr/other", b"x"))
    with pytest.raises(quoting.UnsafeValue,
                       match=rf"^image hostile:1: file '/usr/helper' is a hard link to /{first}, which Enroot "
                             r"leaves out") as err:
        export_tar(data)
    assert "copy" in err.value.hint
    assert list((tmp_path / "out").iterdir()) == []
    # Enroot's own extraction of the same stream (src/docker.sh), for the record:
    root = tmp_path / "enroot-rootfs"
    root.mkdir()
    proc = subprocess.run(["tar", "-C", str(root), "--warning=no-timestamp", "--anchored", "--exclude=dev/*",
                           "--exclude=.dockerenv", "-px"], input=data, capture_output=True)
    assert proc.returncode != 0 and b"Cannot hard link" in proc.stderr


def test_a_hard_link_among_kept_files_stays_a_hard_link(export_tar):
    sqsh = export_tar(tar(member("usr/a", b"payload\n"), member("usr/b", typ=tarfile.LNKTYPE, link="usr/a")))
    assert cat(sqsh, "usr/b") == b"payload\n"
