"""The inventory of a root filesystem, read from its tar stream: dpkg, pip, the OS, file ownership."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

import pytest

from imagekit.attest import inventory

STATUS = """\
Package: libucx0
Status: install ok installed
Architecture: amd64
Source: ucx
Version: 1.13.1-1
Description: UCX
 continued description: Version: 9.9

Package: removed-pkg
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.15-2+b2
"""


def rootfs(files: dict[str, str], links: dict[str, str] = {}) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    buf.seek(0)
    return buf


def test_dpkg_pip_os_and_ownership_from_the_stream():
    site = "usr/local/lib/python3.11/dist-packages"
    stream = rootfs({
        "var/lib/dpkg/status": STATUS,
        "var/lib/dpkg/info/libucx0:amd64.list": "/usr\n/usr/lib/x86_64-linux-gnu/libucp.so.0\n",
        "var/lib/dpkg/info/bash.list": "/bin/bash\n",
        "etc/os-release": 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
        f"{site}/mpi4py-4.0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: mpi4py\nVersion: 4.0.1\n\nbody",
        f"{site}/mpi4py-4.0.1.dist-info/RECORD": "mpi4py/__init__.py,sha256=x,10\n../../../bin/mpi4py,,\n",
        f"{site}/mpi4py/__init__.py": "",
        "usr/lib/x86_64-linux-gnu/libucp.so.0": "",
        "usr/bin/bash": "",
        "opt/unowned": "",
    }, {"bin": "usr/bin"})
    inv = inventory.scan(stream, files=True)
    assert inv.distro == ("debian", "12")
    assert [(p.ecosystem, p.name, p.version, p.source) for p in inv.packages] == [
        ("deb", "libucx0", "1.13.1-1", "ucx"), ("deb", "bash", "5.2.15-2+b2", ""), ("pypi", "mpi4py", "4.0.1", "")]
    assert inv.packages[2].location == f"/{site}"
    assert inv.owned["pypi:mpi4py"] == {f"/{site}/mpi4py/__init__.py", "/usr/local/bin/mpi4py"}
    assert inv.owned["deb:libucx0"] == {"/usr", "/usr/lib/x86_64-linux-gnu/libucp.so.0"}
    assert inv.symlinks == {"/bin": "usr/bin"}
    assert "/opt/unowned" in inv.files


def test_without_files_only_the_packages_are_kept():
    inv = inventory.scan(rootfs({"var/lib/dpkg/status": STATUS}))
    assert inv.files is None and inv.owned is None and [p.name for p in inv.packages] == ["libucx0", "bash"]


def test_h13_each_bound_of_the_scan_is_one_error_naming_the_image(monkeypatch):
    """H13: the scan keeps only names and versions of Python distributions, and stops at its bounds (here
    lowered, to be reached with a few members) with one error naming what was scanned and the bound."""
    dists = {f"usr/lib/python3/dist-packages/p{i}-1.0.dist-info/METADATA": f"Name: p{i}\nVersion: 1.0\n\nbody\n"
             for i in range(4)}
    monkeypatch.setattr(inventory, "MAX_DISTS", 3)
    with pytest.raises(inventory.ScanBound, match=r"^mpi.sqsh: more than 3 Python distributions, a bound"):
        inventory.scan(rootfs(dists), what="mpi.sqsh")
    monkeypatch.setattr(inventory, "MAX_DISTS", 4)
    assert len(inventory.scan(rootfs(dists)).of("pypi")) == 4
    monkeypatch.setattr(inventory, "MAX_PATHS", 3)
    with pytest.raises(inventory.ScanBound, match="more than 3 paths"):
        inventory.scan(rootfs(dists), files=True)
    monkeypatch.setattr(inventory, "MAX_TOTAL", 40)
    with pytest.raises(inventory.ScanBound, match="more than 40 bytes of package metadata"):
        inventory.scan(rootfs(dists))


def test_only_the_headers_of_a_metadata_file_are_read(monkeypatch):
    """Name and Version come before the description; a description past MAX_HEADERS is never kept."""
    monkeypatch.setattr(inventory, "MAX_HEADERS", 64)
    monkeypatch.setattr(inventory, "MAX_TOTAL", 200)
    text = "Metadata-Version: 2.1\nName: big\nVersion: 2.0\n\n" + "x" * 100_000
    found = inventory.scan(rootfs({"usr/lib/python3/dist-packages/big-2.0.dist-info/METADATA": text}))
    assert [(p.name, p.version) for p in found.of("pypi")] == [("big", "2.0")]


def test_h13_sparse_metadata_files_are_scanned_in_bounded_memory(tmp_path):
    """The red team's file (sbom/mk_meta_sqsh.sh), at half its count: a few KiB of squashfs holding 48
    sparse METADATA files of 16 MiB each. `imagekit sbom` kept every one (0.8 GB here, 1.75 GB for 96);
    now it reads each one's headers and its peak memory stays far below one such file per distribution."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    for i in range(48):
        meta = root / "usr/lib/python3/dist-packages" / f"p{i}-1.0.dist-info" / "METADATA"
        meta.parent.mkdir(parents=True)
        with open(meta, "wb") as fh:
            fh.truncate((16 << 20) - 1)
    sqsh = tmp_path / "meta.sqsh"
    subprocess.run(["mksquashfs", str(root), str(sqsh), "-quiet", "-noappend"], check=True)
    assert sqsh.stat().st_size < 64 << 10
    peak = tmp_path / "peak"
    code = ("import resource, sys\nfrom imagekit.cli import main\nout = sys.argv.pop()\ntry:\n    main()\n"
            "finally:\n    open(out, 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))")
    proc = subprocess.run([sys.executable, "-c", code, "sbom", str(sqsh), "-o", str(tmp_path / "out.json"), "-q",
                           str(peak)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert int(peak.read_text()) < 300 << 10, f"peak {int(peak.read_text()) >> 10} MiB"     # KiB
