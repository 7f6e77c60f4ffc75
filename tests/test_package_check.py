"""The stack's distro packages, looked up in the base image's archive before a build.

The archives here are real apt archive trees (``dists/SUITE/COMPONENT/binary-ARCH/Packages.xz``)
that each test writes, read over ``file://`` and over HTTP from a server the test starts; the base
images are real engine images that name them in their labels or their sources.list. One test reads
the real Debian archive the shipped base was bootstrapped from (as every build of it does).
"""

from __future__ import annotations

import functools
import http.server
import lzma
import os
import subprocess
import textwrap
import threading

import pytest

from imagekit import package_check
from imagekit import stack as stack_mod
from imagekit.util.errors import StackError
from helpers.stack_helpers import line_of, write

INDEX = """\
Package: htop
Version: 3.2.2-2
Architecture: amd64

Package: libhdf5-dev
Version: 1.10.8+repack1-1
Provides: libhdf5-serial-dev (= 1.10.8+repack1-1), hdf5-dev

Package: python3-numpy
Version: 1:1.24.2-1
Provides: python3-numpy-abi9, python3-numpy-api16

Package: python3-mpi4py
Version: 3.1.4-1
"""


def make_archive(root, suite="bookworm", component="main", arch="amd64", text=INDEX, compress="xz"):
    d = root / "dists" / suite / component / f"binary-{arch}"
    d.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    if compress == "xz":
        (d / "Packages.xz").write_bytes(lzma.compress(data))
    else:
        (d / "Packages").write_bytes(data)
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "imagekit" / "apt-index"


def test_sources_one_line_and_deb822():
    text = textwrap.dedent("""\
        ### /etc/apt/sources.list
        deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] http://m.example/debian bookworm main contrib
        deb-src http://m.example/debian bookworm main
        # deb http://old.example/debian buster main
        ### /etc/apt/sources.list.d/debian.sources
        Types: deb
        URIs: http://m.example/debian
        Suites: bookworm bookworm-updates
        Components: main

        Types: deb
        URIs: http://security.example/debian-security
        Suites: bookworm-security
        Components: main
        Enabled: no
        """)
    archives = package_check.parse_sources(text)
    assert [(a.mirror, a.suite, a.components) for a in archives] == [
        ("http://m.example/debian", "bookworm", ("main", "contrib")),
        ("http://m.example/debian", "bookworm", ("main",)),
        ("http://m.example/debian", "bookworm-updates", ("main",)),
    ]


def test_index_names_include_what_packages_provide():
    names = package_check.parse_index(INDEX.encode())
    assert {"htop", "libhdf5-dev", "libhdf5-serial-dev", "hdf5-dev", "python3-numpy-abi9"} <= names
    assert "1.10.8+repack1-1)" not in names and "(=" not in names


def test_names_are_cached_and_used_offline(tmp_path, cache):
    archive = make_archive(tmp_path / "mirror")
    a = package_check.Archive(f"file://{archive}", "bookworm", ("main",))
    names, note = package_check.archive_names(a, "amd64")
    assert "htop" in names and note == ""
    (archive / "dists" / "bookworm" / "main" / "binary-amd64" / "Packages.xz").unlink()
    again, note = package_check.archive_names(a, "amd64")
    assert again == names and note == "", "a fresh cache answers without the archive"
    stale, note = package_check.archive_names(a, "amd64", max_age=0)
    assert stale == names and "used the package names cached" in note
    b = package_check.Archive(f"file://{tmp_path / 'nowhere'}", "bookworm", ("main",))
    none, why = package_check.archive_names(b, "amd64")
    assert none is None and "none is cached; packages not checked" in why


def test_a_plain_packages_file_and_a_second_component(tmp_path, cache):
    root = make_archive(tmp_path / "m", compress="none")
    make_archive(root, component="contrib", text="Package: contrib-only\nVersion: 1\n")
    names, _ = package_check.archive_names(package_check.Archive(f"file://{root}", "bookworm", ("main", "contrib")),
                                           "amd64")
    assert {"htop", "contrib-only"} <= names


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def http_archive(tmp_path_factory):
    """A real HTTP server over an archive tree: what a site mirror is."""
    root = make_archive(tmp_path_factory.mktemp("http-mirror"))
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _labelled_base(tag: str, labels: dict[str, str]) -> str:
    """An image of the shipped base with other io.imagekit.base labels (a LABEL-only build: no layers)."""
    dockerfile = "FROM imagekit/debian:bookworm\n" + "".join(f'LABEL {k}="{v}"\n' for k, v in labels.items())
    subprocess.run(["/usr/bin/docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    return tag


@pytest.mark.engine
def test_a_misspelt_package_is_refused_at_its_line(tmp_path, cache, base_image, http_archive):
    base = _labelled_base("ik-ux-test/pkgbase:1", {"io.imagekit.base": "debian:bookworm",
                                                   "io.imagekit.base.mirror": http_archive,
                                                   "io.imagekit.base.components": "main"})
    path = write(tmp_path, f"""\
        name: t
        base: {{image: {base}, distro: debian12}}
        packages:
          runtime: [htop]
          devel: [libhdf5-serial-dev, {{debian12: libhdf5-devv, debian13: libhdf5-dev}}]
        components:
          python: {{packages: [mpi4py, numpyy]}}
        """)
    s = stack_mod.load(path)
    with pytest.raises(StackError) as info:
        package_check.check(s)
    err = info.value
    assert (err.file, err.line, err.key) == (str(path), line_of(path, "libhdf5-devv"), "packages.devel[2]")
    assert "no package 'libhdf5-devv'" in str(err)
    assert "did you mean 'libhdf5-dev'?" in str(err)
    assert f"line {line_of(path, 'numpyy')}" in str(err) and "python3-numpyy" in str(err), \
        "the other unknown names are listed too"
    fixed = write(tmp_path, path.read_text().replace("devv", "dev").replace("numpyy", "numpy"))
    result = package_check.check(stack_mod.load(fixed))
    assert sorted(result.checked) == ["htop", "libhdf5-dev", "libhdf5-serial-dev", "python3-mpi4py",
                                      "python3-numpy"]
    assert result.reason == "" and result.archives == [f"{http_archive} bookworm main (amd64)"]


@pytest.mark.engine
def test_an_image_without_base_labels_is_read_through_its_sources(tmp_path, cache, base_image):
    """No io.imagekit.base labels: the sources.list inside the image names the archive (here the real
    Debian archive the shipped base came from, as its builds read it)."""
    base = _labelled_base("ik-ux-test/pkgbase-unlabelled:1", {"io.imagekit.base": "", "io.imagekit.base.mirror": ""})
    archives, reason = package_check.archives_of(base)
    assert archives and reason == "" and archives[0].suite == "bookworm"
    path = write(tmp_path, f"name: t\nbase: {{image: {base}, distro: debian12}}\npackages: {{runtime: [htopp]}}\n")
    with pytest.raises(StackError, match="did you mean 'htop'"):
        package_check.check(stack_mod.load(path))


@pytest.mark.engine
def test_a_base_that_is_not_there_is_not_checked(tmp_path, cache):
    path = write(tmp_path, "name: t\nbase: {image: ik-ux-test/not-there:1, distro: debian12}\n"
                           "packages: {runtime: [anything-at-all]}\n")
    result = package_check.check(stack_mod.load(path))
    assert result.checked == [] and "not in the engine yet" in result.reason
    assert not cache.exists(), "no index was fetched for it"
