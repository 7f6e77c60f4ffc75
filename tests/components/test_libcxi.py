"""libcxi from HPE's public Slingshot sources: three files (libcxi, the Cassini headers, the CXI driver's uAPI
headers), each pinned by the site; installed in HPE's layout (lib64) so that a host's libcxi can be bound
over it; the runtime keeps the library and the diagnostics. (Built for real, with libfabric's cxi provider
on it: tests/components/test_fabric_images.py.)"""

from __future__ import annotations

import pytest

from imagekit import render, sources, stack
from imagekit.util.errors import StackError

SLINGSHOT = """\
name: cxi-only
extends: debian-cuda
components:
  libcxi: {version: "14.0.0"%s}
"""


def load(tmp_path, mirror=None, extra=', cxi_driver: "14.0.1"'):
    path = tmp_path / "cxi.yaml"
    path.write_text(SLINGSHOT % extra)
    return stack.load(str(path), mirror=str(mirror) if mirror else None)


def test_each_of_hpes_three_files_is_pinned_and_taken_from_the_mirror(tmp_path, site_mirror):
    s = load(tmp_path, site_mirror)
    arts = {a.component: a for a in s.get("libcxi").artifacts()}
    assert {a.filename for a in arts.values()} == {"shs-libcxi-14.0.0.tar.gz", "shs-cassini-headers-14.0.0.tar.gz",
                                                   "shs-cxi-driver-14.0.1.tar.gz"}
    assert all(a.sha256 and "site pins file" in a.origin for a in arts.values())
    text = render.render(s, "docker")
    assert text.index("shs-cassini-headers-14.0.0") < text.index("shs-cxi-driver-14.0.1") < text.index(
        "shs-libcxi-14.0.0.tar.gz /var/tmp")
    assert 'CPPFLAGS="-I/opt/cxi/include -I/opt/cxi/include/uapi"' in text and 'pkg_CFLAGS="-Wall -Wno-error"' in text
    runtime = text[text.index("AS runtime"):]
    assert "COPY --from=devel /opt/cxi/lib64 /opt/cxi/lib64" in runtime and "cxi_stat" in runtime
    assert "cxi_heatsink_check" not in runtime and "libnl-3-200" in runtime
    assert s.get("libcxi").labels()["libdir"] == "/opt/cxi/lib64"


def test_a_part_without_a_pin_names_the_file_and_the_pins_file_line(tmp_path):
    with pytest.raises(StackError, match=r"no sha256 pin for cxi-driver 14\.0\.9") as info:
        load(tmp_path, extra=', cxi_driver: "14.0.9"')
    assert "shs-cxi-driver-14.0.9.tar.gz" in info.value.hint and 'cxi-driver: {"14.0.9"' in info.value.hint
    assert info.value.key == "components.libcxi.cxi_driver"


def test_a_site_pin_for_a_file_the_mirror_lacks_is_one_line_naming_the_file_and_the_mirror(tmp_path, site_mirror):
    """The site pins cassini-headers 14.0.2, which the stand-in mirror does not have."""
    pins = tmp_path / "pins.yaml"
    pins.write_text('pins:\n  libcxi: {"14.0.0": "%s"}\n  cxi-driver: {"14.0.1": "%s"}\n'
                    '  cassini-headers: {"14.0.2": "%s"}\n' % ("1" * 64, "2" * 64, "3" * 64))
    from imagekit.util.settings import Site

    path = tmp_path / "cxi.yaml"
    path.write_text(SLINGSHOT % ', cassini_headers: "14.0.2", cxi_driver: "14.0.1"')
    s = stack.load(str(path), mirror=str(site_mirror), site=Site(pins_file=pins))
    cassini = next(a for a in s.get("libcxi").artifacts() if a.component == "cassini-headers")
    with pytest.raises(sources.UpstreamSourceError) as info:
        sources.fetch(cassini, str(site_mirror))
    first = info.value.message.splitlines()
    assert len(first) == 1, info.value.message
    assert "shs-cassini-headers-14.0.2.tar.gz is not in the mirror " + str(site_mirror) in first[0]
    assert f"pinned by the site pins file {pins}" in first[0]
