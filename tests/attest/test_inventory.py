"""The inventory of a root filesystem, read from its tar stream: dpkg, pip, the OS, file ownership."""

from __future__ import annotations

import io
import tarfile

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
