"""Enroot squashfs export: config files (unit) and the real pipeline against the engine.

Enroot itself cannot be installed here; the expected files follow the format
Enroot's src/docker.sh generates (see imagekit.export.enroot's docstring), and
/etc/rc is executed the way enroot-switchroot does it: ``$SHELL /etc/rc ARGS``
inside the root filesystem, with /etc/environment loaded.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from imagekit.util import login_env
from imagekit.export import ExportRequest, enroot, export_image, layers, sif, squash
from helpers.export_helpers import assert_superblock, engine_tree, superblock, tree_listing, unsquash

# ---------------------------------------------------------------- unit: config files


def test_rc_without_entrypoint_or_cmd_runs_bin_sh():
    rc = enroot.rc_file({})
    assert "    exec  '/bin/sh'\n" in rc
    assert '    exec  "$@"\n' in rc
    assert rc.startswith('mkdir -p "/" 2> /dev/null\ncd "/" && unset OLDPWD || exit 1\n')


def test_rc_labels_fstab_environment_formats():
    config = {"Labels": {"b": "2", "a": "one two"}, "Volumes": {"/z": {}, "/a-b": {}},
              "Env": ["A=1", "B=x y"], "WorkingDir": '/w"d', "Entrypoint": ["/e"], "Cmd": None}
    rc = enroot.rc_file(config)
    assert rc.startswith("# a one two\n# b 2\n\nmkdir -p \"/w\\\"d\"")
    assert "    exec '/e' \"$@\"\n" in rc and "    exec '/e' \n" in rc
    assert enroot.fstab_file(config) == (
        "${ENROOT_ROOTFS}/a-b /a-b none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/z /z none x-create=dir,bind,rw,nosuid,nodev\n")
    assert enroot.environment_file(config) == "A=1\nB=x y\n"
    assert enroot.environment_file({"Env": None}) == ""


def test_missing_workdir_and_etc_are_added():
    build = enroot.extra_entries({"WorkingDir": "/new/dir"}, mtime=5)
    names = [info.name for info, _ in build({"bin", "new"})]
    assert names[:3] == ["etc", "etc/profile.d", "new/dir"]
    assert names[3:] == list(enroot.CONFIG_FILES)


# ---------------------------------------------------------------- engine: the real pipeline


def _expected_mode(info: tarfile.TarInfo) -> int:
    """Enroot's fixperms applied to a tar member's mode."""
    mode = info.mode
    if info.issym() or info.islnk():
        return mode
    mode |= 0o400
    if info.isdir() or mode & 0o111:
        mode |= 0o100
    if info.isdir() and info.name.strip("/").count("/") + 1 <= 15:  # Enroot 4.x: find -maxdepth 15
        mode |= 0o200
    return mode


@pytest.fixture(scope="module")
def odd_sqsh(odd_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("enroot") / "odd.sqsh"
    result = export_image(odd_image, ExportRequest("enroot", preset=squash.DEFAULT_PRESET), out)
    return out, result


@pytest.fixture(scope="module")
def odd_tree(odd_sqsh, tmp_path_factory):
    return unsquash(odd_sqsh[0], tmp_path_factory.mktemp("enroot-tree") / "root")


@pytest.mark.engine
def test_tree_matches_engine_export(odd_image, odd_tree, docker_bin):
    ref = engine_tree(docker_bin, odd_image)
    # What Docker's init layer made for the container, not the image's layers (PXS3-4): left out.
    docker_made = {*layers.INIT_LAYER_FILES, layers.INIT_LAYER_MTAB[0]}
    expected = {n: m for n, m in ref.items()
                if n and n != ".dockerenv" and not n.startswith("dev/")
                and n not in enroot.CONFIG_FILES and n not in docker_made}
    got = tree_listing(odd_tree)
    assert docker_made <= set(ref) and not docker_made & set(got)
    assert "dev" in got and not any(n.startswith("dev/") for n in got)
    assert ".dockerenv" not in got
    assert set(got) - set(expected) == set(enroot.CONFIG_FILES) - set(expected)
    assert set(expected) <= set(got)
    for name, info in expected.items():
        st = got[name]
        assert st.st_uid == 0 and st.st_gid == 0, name          # -all-root
        assert stat.S_IMODE(st.st_mode) == _expected_mode(info) & 0o7777, name
        if info.issym():
            assert (odd_tree / name).readlink().as_posix() == info.linkname, name
        elif info.isfile():
            assert st.st_size == info.size, name
    data = odd_tree / "opt/data"
    assert (data / "hard").stat().st_ino == (data / "file.txt").stat().st_ino
    assert (data / "file.txt").read_text() == "payload\n"
    assert stat.S_IMODE((data / "suid").stat().st_mode) == 0o4755
    assert stat.S_IMODE((data / "noperm").stat().st_mode) == 0o400       # u+r
    assert stat.S_IMODE((data / "groupx").stat().st_mode) == 0o570       # u+rX
    assert stat.S_IMODE((odd_tree / "opt/ro/sub").stat().st_mode) == 0o755  # u+w on dirs
    # Depth 9: Enroot 3.x (depth 5) left it read-only; Enroot 4.x makes it writable, and a .sqsh
    # started straight through squashfuse (Pyxis use_squashfuse=1) shows the difference.
    assert stat.S_IMODE((odd_tree / "opt/deep/1/2/3/4/5/6/7").stat().st_mode) == 0o755
    assert stat.S_IMODE((odd_tree / "opt/deep/1/2/3/4/5/6/7/8/9/10/11/12/13/14").stat().st_mode) == 0o555


@pytest.mark.engine
def test_config_files_follow_image_config(odd_image, odd_tree):
    from imagekit.engines.docker import inspect

    config = inspect(odd_image).attrs["Config"]
    etc = odd_tree / "etc"
    assert (etc / "environment").read_text().splitlines() == config["Env"]
    assert 'QUOTED=it\'s "quoted" $x \\ back' in config["Env"]
    assert (etc / "fstab").read_text() == (
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/scratch /scratch none x-create=dir,bind,rw,nosuid,nodev\n")
    rc = (etc / "rc").read_text()
    head, _, _ = rc.partition("\n\n")
    assert head.splitlines() == [f"# {k} {config['Labels'][k]}" for k in sorted(config["Labels"])]
    assert "# io.imagekit.test yes" in head and "# org.example.note two words" in head
    assert 'cd "/work dir" && unset OLDPWD || exit 1' in rc
    assert "    exec '/bin/echo' 'ep arg' 'it'\\''s' \"$@\"\n" in rc
    assert "    exec '/bin/echo' 'ep arg' 'it'\\''s' 'cmd one' 'two'\n" in rc
    assert (etc / "rc.local").read_text() == enroot.RC_LOCAL
    assert (odd_tree / "work dir").is_dir()


def _run_rc(tree: Path, *args: str) -> str:
    """Start the tree like enroot-switchroot: environment from /etc/environment, sh /etc/rc ARGS."""
    env = dict(line.split("=", 1) for line in (tree / "etc/environment").read_text().splitlines())
    proc = subprocess.run(["chroot", str(tree), "/bin/sh", "/etc/rc", *args], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.engine
def test_rc_runs_entrypoint_cmd_and_args(odd_tree):
    assert _run_rc(odd_tree) == "ep arg it's cmd one two\n"
    assert _run_rc(odd_tree, "x", "y z") == "ep arg it's x y z\n"
    rc_local = odd_tree / "etc/rc.local"
    original = rc_local.read_text()
    try:
        # What Pyxis writes when it must not run the entrypoint; also shows cwd and Env.
        rc_local.write_text('echo "pwd=$PWD greeting=$GREETING quoted=$QUOTED"\nexec "$@"\n')
        out = _run_rc(odd_tree, "/bin/echo", "direct")
        assert out == "pwd=/work dir greeting=hello world quoted=it's \"quoted\" $x \\ back\ndirect\n"
    finally:
        rc_local.write_text(original)


@pytest.mark.engine
def test_default_preset_superblock(odd_sqsh):
    info = superblock(odd_sqsh[0])
    assert_superblock(info, squash.PRESETS[squash.DEFAULT_PRESET])
    assert "Xattrs are not stored" in info
    assert odd_sqsh[1].sha256 == hashlib.sha256(odd_sqsh[0].read_bytes()).hexdigest()
    assert odd_sqsh[1].bytes == odd_sqsh[0].stat().st_size
    assert odd_sqsh[1].compression == squash.DEFAULT_PRESET


@pytest.mark.engine
def test_enroot_preset_is_enroots_own_options(odd_image, odd_tree, tmp_path):
    """-comp lzo -noD as Enroot's mksquashfs on a directory: raw data, no tail-end packing,
    an NFS export table; the same tree as the default preset."""
    res = export_image(odd_image, ExportRequest("enroot", preset="enroot"), tmp_path / "e.sqsh")
    info = superblock(Path(res.path))
    assert "Compression lzo\n" in info and "Data is uncompressed" in info
    assert "Always-use-fragments option is not specified" in info
    assert "Filesystem is exportable via NFS" in info and "Xattrs are not stored" in info
    assert res.tool == "sqfstar" and res.compression == "enroot"
    tree = unsquash(Path(res.path), tmp_path / "tree")
    got, want = tree_listing(tree), tree_listing(odd_tree)
    assert {n: (s.st_mode, s.st_size) for n, s in got.items() if not n.startswith("dev/")} == \
        {n: (s.st_mode, s.st_size) for n, s in want.items() if not n.startswith("dev/")}


@pytest.mark.engine
def test_reproducible_with_source_date_epoch(odd_image, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    a = export_image(odd_image, ExportRequest("enroot"), tmp_path / "a.sqsh")
    b = export_image(odd_image, ExportRequest("enroot"), tmp_path / "b.sqsh")
    assert a.sha256 == b.sha256
    listing = subprocess.run(["unsquashfs", "-lln", str(tmp_path / "a.sqsh"), "etc/rc"],
                             capture_output=True, text=True, check=True).stdout
    assert "2023-11-14 22:13" in listing


@pytest.mark.engine
@pytest.mark.parametrize("fmt", ["enroot", "sif"])
def test_the_socket_stream_writes_the_clis_bytes(odd_image, tmp_path, monkeypatch, fmt):
    """The export read from the engine's socket (spliced past Python) and the one `docker export`
    pipes (the path an engine on tcp or ssh takes) give one file, byte for byte."""
    from imagekit.engines import docker_socket

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    direct = export_image(odd_image, ExportRequest(fmt), tmp_path / "socket", store=False)
    monkeypatch.setattr(docker_socket, "socket_path", lambda env=None: None)
    cli = export_image(odd_image, ExportRequest(fmt), tmp_path / "cli", store=False)
    assert direct.sha256 == cli.sha256 == hashlib.sha256((tmp_path / "cli").read_bytes()).hexdigest()


@pytest.mark.engine
def test_shared_fs_preset_and_tar2sqfs(odd_image, odd_tree, tmp_path):
    res = export_image(odd_image, ExportRequest("enroot", preset="shared-fs"), tmp_path / "s.sqsh")
    info = subprocess.run(["unsquashfs", "-s", res.path], capture_output=True, text=True).stdout
    assert "Compression zstd" in info and "Block size 1048576" in info
    ng = export_image(odd_image, ExportRequest("enroot", tool="tar2sqfs"), tmp_path / "ng.sqsh")
    assert ng.tool == "tar2sqfs"
    tree = unsquash(Path(ng.path), tmp_path / "ng")
    got, want = tree_listing(tree), tree_listing(odd_tree)
    want.pop("dev/null", None)  # made by the rc test's `2> /dev/null` inside the chroot
    assert set(got) == set(want)
    assert all(st.st_uid == 0 and st.st_gid == 0 for st in got.values())
    assert {n: stat.S_IMODE(s.st_mode) for n, s in got.items()} == \
        {n: stat.S_IMODE(s.st_mode) for n, s in want.items()}


@pytest.mark.engine
def test_an_older_imagekits_last_place_profile_script_is_left_out(base_image, docker_bin, tmp_path):
    """An image built by imagekit before issue 34 carries the login-environment script last in
    /etc/profile.d, where it undoes the image's own profile scripts: the export leaves it out and
    writes the script at its new, first place."""
    tag = "imagekit-test/old-login-script:1"
    proc = subprocess.run([docker_bin, "build", "-q", "-t", tag, "-"], text=True, capture_output=True,
                          input=f"FROM {base_image}\nRUN mkdir -p /etc/profile.d && "
                                f"echo '# old' > /{login_env.LEGACY_PATHS[0]}\n",
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    try:
        out = tmp_path / "old.sqsh"
        export_image(tag, ExportRequest("enroot"), out, store=False)
        root = unsquash(out, tmp_path / "root")
        assert sorted(p.name for p in (root / "etc/profile.d").iterdir() if "imagekit" in p.name) == \
            ["00-imagekit-environment.sh"]
        assert (root / login_env.PATH).read_text() == login_env.script()
    finally:
        subprocess.run([docker_bin, "rmi", tag], capture_output=True)


def _squashfs_tools_at_least(major: int, minor: int) -> bool:
    out = subprocess.run(["mksquashfs", "-version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


@pytest.mark.engine
@pytest.mark.parametrize("fmt", ["enroot", "sif"])
def test_two_exports_of_one_image_are_the_same_bytes(odd_image, tmp_path, monkeypatch, fmt):
    """Review 4: two enroot exports of one image (the store's and --no-store's) had two sha256s, so a
    re-export no longer matched its signed statement. Every time comes from the image now; squashfs-tools
    4.5 still stamps the root directory with the export's time (docs/export.md, "Same bytes")."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = export_image(odd_image, ExportRequest(fmt), tmp_path / "a", store=tmp_path / "store")
    b = export_image(odd_image, ExportRequest(fmt), tmp_path / "b", store=False)
    assert not b.store_hit
    offset = [] if fmt == "enroot" else ["-o", str(sif.read_sif(Path(b.path)).primary_partition().offset)]
    listings = [subprocess.run(["unsquashfs", *offset, "-lln", p], capture_output=True, text=True, check=True).stdout
                for p in (a.path, b.path)]
    if _squashfs_tools_at_least(4, 6):
        assert a.sha256 == b.sha256
    else:
        # The listings (names, modes, owners, sizes, every time but the root's) agree line for line.
        first, second = (text.splitlines() for text in listings)
        assert first[1:] == second[1:] and len(first) > 20
    if fmt == "sif":   # the enroot form: test_reproducible_with_source_date_epoch
        monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
        c = export_image(odd_image, ExportRequest(fmt), tmp_path / "c", store=False)
        d = export_image(odd_image, ExportRequest(fmt), tmp_path / "d", store=tmp_path / "store2")
        assert c.sha256 == d.sha256
