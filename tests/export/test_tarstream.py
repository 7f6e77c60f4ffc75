"""The tar filter between real pipes: file data spliced in the kernel equals the copied bytes."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

from imagekit.export import enroot, tarstream


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, size in enumerate([0, 100, tarstream.SPLICE_MIN - 1, tarstream.SPLICE_MIN,
                                  3 * tarstream.CHUNK + 17, 5000, 2 * tarstream.CHUNK]):
            info = tarfile.TarInfo(f"d/f{i}")
            info.size, info.mode = size, 0o600
            tar.addfile(info, io.BytesIO(os.urandom(size)))
        info = tarfile.TarInfo("dev/null")                       # dropped by the filter
        info.size = 200_000
        tar.addfile(info, io.BytesIO(bytes(200_000)))
    return buf.getvalue()


def _through_pipes(data: bytes, tmp_path) -> tuple[bytes, int]:
    """filter_tar reading a pipe (like docker export's) and writing a pipe (like sqfstar's)."""
    src_file = tmp_path / "in.tar"
    src_file.write_bytes(data)
    out_file = tmp_path / "out.tar"
    counted = []
    with open(out_file, "wb") as out:
        src = subprocess.Popen(["cat", str(src_file)], stdout=subprocess.PIPE, bufsize=0)
        dst = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=out)
        reader = io.BufferedReader(src.stdout, buffer_size=1 << 20)
        tarstream.filter_tar(reader, dst.stdin, keep=enroot.keep, adjust=enroot.fixperms,
                             on_bytes=counted.append)
        dst.stdin.close()
        assert dst.wait() == 0 and src.wait() == 0
    return out_file.read_bytes(), sum(counted)


def test_spliced_output_equals_copied_output(tmp_path, monkeypatch):
    spliced = []
    real_splice = os.splice

    def counting_splice(*args, **kwargs):
        moved = real_splice(*args, **kwargs)
        spliced.append(moved)
        return moved

    monkeypatch.setattr(os, "splice", counting_splice)
    data = _tar()
    copied, copy_counted = io.BytesIO(), []
    tarstream.filter_tar(io.BytesIO(data), copied, keep=enroot.keep, adjust=enroot.fixperms,
                         on_bytes=copy_counted.append)
    piped, counted = _through_pipes(data, tmp_path)
    assert sum(spliced) > 4 * tarstream.CHUNK                    # the big members bypassed Python
    assert piped == copied.getvalue()
    assert counted == sum(copy_counted) > 5 * tarstream.CHUNK     # progress counts spliced bytes
    with tarfile.open(fileobj=io.BytesIO(piped)) as tar:
        members = {m.name: m for m in tar}
        assert "dev/null" not in members
        big = tar.extractfile(members["d/f4"]).read()
    original = tarfile.open(fileobj=io.BytesIO(data))
    assert big == original.extractfile("d/f4").read()
    assert members["d/f4"].mode == 0o600


def test_splice_is_used_between_pipes_only(tmp_path):
    r, w = os.pipe()
    try:
        with open(r, "rb", buffering=0, closefd=False) as raw:
            reader = tarstream._Reader(io.BufferedReader(raw), None)
            with open(w, "wb", closefd=False) as pipe_out:
                assert reader.splice_to(pipe_out) is bool(hasattr(os, "splice"))
            reader2 = tarstream._Reader(io.BufferedReader(raw), None)
            with open(tmp_path / "f", "wb") as file_out:
                assert reader2.splice_to(file_out) is False
            # Two buffers over one fd: splicing would skip the bytes in the lower one.
            doubled = tarstream._Reader(io.BufferedReader(io.BufferedReader(raw)), None)
            with open(w, "wb", closefd=False) as pipe_out:
                assert doubled.splice_to(pipe_out) is False
    finally:
        os.close(r)
        os.close(w)


def test_a_changed_time_is_written_to_the_header_and_a_pax_time_that_would_override_it_goes():
    """What makes two exports of one image the same bytes (layers.steady_times): the init layer's entries
    get the image's time, in the ustar field and without the pax record (sub-second) that would win."""
    from imagekit.export import layers

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, when in (("etc/hosts", 1733112655.25), ("usr/bin/tool", 1600000000)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = 0, 0o755, when
            info.pax_headers = {"mtime": repr(when)} if name == "etc/hosts" else {}
            tar.addfile(info, io.BytesIO(b""))
    out = io.BytesIO()
    tarstream.filter_tar(io.BufferedReader(io.BytesIO(buf.getvalue())), out, keep=lambda m: True,
                         adjust=layers.steady_times(1000))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        got = {m.name: (m.mtime, m.pax_headers.get("mtime")) for m in tar.getmembers()}
    assert got == {"etc/hosts": (1000, None), "usr/bin/tool": (1600000000, None)}
    assert layers.steady_times(None) is None


def _owned_tar() -> bytes:
    """Members whose owner names exist on every host with other ids: ``root`` (0) for uid 4242, in the
    ustar fields and, for the second, in pax records too (as a long name would make a writer put them)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, pax in (("ustar-named", {}), ("pax-named", {"uname": "root", "gname": "root"})):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = 1, 0o644, 4242, 4343
            info.uname = info.gname = "root"
            info.pax_headers = pax
            tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def test_members_leave_without_owner_names_and_with_their_ids():
    """The squashfs tools map a member's names through this host's passwd and group: the names go, each
    header's checksum stays right (tarfile checks it), the numeric ids and everything else stay."""
    out = io.BytesIO()
    tarstream.filter_tar(io.BufferedReader(io.BytesIO(_owned_tar())), out, keep=lambda m: True)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        got = {m.name: (m.uid, m.gid, m.uname, m.gname, m.mode, tar.extractfile(m).read()) for m in tar}
        pax = {m.name: m.pax_headers for m in tar}
    assert got == {name: (4242, 4343, "", "", 0o644, b"x") for name in ("ustar-named", "pax-named")}
    assert not any({"uname", "gname"} & set(records) for records in pax.values())


def test_mksquashfs_keeps_the_images_ids_only_without_the_names(tmp_path):
    """The real tool, as a SIF export runs it (owners kept): fed the names, mksquashfs -tar writes this
    host's uid of ``root`` (0) for a file the image gives uid 4242; fed the filter's stream, 4242."""
    from imagekit.export import squash

    def owners(stream: bytes, out) -> set[str]:
        spec = squash.SquashSpec(preset="fast", tool="mksquashfs", all_root=False)
        cmd = squash.tool_command("mksquashfs", squash.pick_tool("mksquashfs")[1], spec, out)
        subprocess.run(cmd, input=stream, check=True, capture_output=True)
        listing = subprocess.run(["unsquashfs", "-lln", str(out)], check=True, capture_output=True, text=True)
        return {line.split()[1] for line in listing.stdout.splitlines() if "-named" in line}

    filtered = io.BytesIO()
    tarstream.filter_tar(io.BufferedReader(io.BytesIO(_owned_tar())), filtered, keep=lambda m: True)
    assert owners(_owned_tar(), tmp_path / "named.sqsh") == {"0/0"}
    assert owners(filtered.getvalue(), tmp_path / "filtered.sqsh") == {"4242/4343"}
