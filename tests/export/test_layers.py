"""The layer merge, against the OCI image spec's changeset rules (image-spec layer.md: whiteouts,
opaque directories, hard links) as overlayfs applies them. The trees are checked here member by
member; test_image_source.py shows that the engine's ``docker export`` of the same images agrees."""

from __future__ import annotations

import io
import tarfile

import pytest

from imagekit.export import layers as L
from imagekit.export.layers import Layer, LayerError, merge

from helpers.layered import layer_tar, sha
from helpers.needs import need


def as_layers(*members: list[tuple], media_type: str = "application/vnd.oci.image.layer.v1.tar") -> list[Layer]:
    out = []
    for i, m in enumerate(members):
        data = layer_tar(m)
        out.append(Layer(digest=sha(data), size=len(data), media_type=media_type,
                         feed=lambda o, d=data: o.write(d), where=f"layer {i + 1}"))
    return out


def merged(*members: list[tuple]) -> dict[str, tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]:
    buf = io.BytesIO()
    merge(as_layers(*members), buf)
    buf.seek(0)
    tree: dict = {}
    order = []
    with tarfile.open(fileobj=buf) as tar:
        for info in tar:
            assert info.name not in tree, f"{info.name} twice"
            order.append(info.name)
            tree[info.name] = (info, tar.extractfile(info).read() if info.isfile() else None)
    for name in order:          # every parent comes before what it holds
        parent = name.rpartition("/")[0]
        assert not parent or order.index(parent) < order.index(name), (parent, name)
    return tree


def test_whiteouts_of_files_and_directories():
    tree = merged([("d", "a"), ("f", "a/x", b"x"), ("f", "a/y", b"y"), ("d", "d"), ("f", "d/1", b"1")],
                  [("f", "a/.wh.x", b""), ("f", ".wh.d", b"")])
    assert set(tree) == {"a", "a/y"}


def test_opaque_directory_hides_what_is_below_it_only():
    tree = merged([("d", "o", 0o700), ("f", "o/old", b"old")],
                  [("d", "o", 0o750), ("f", "o/.wh..wh..opq", b""), ("f", "o/new", b"new")])
    assert set(tree) == {"o", "o/new"}
    assert tree["o"][0].mode == 0o750


def test_a_file_replaced_by_a_directory_and_back():
    tree = merged([("f", "f", b"0")],
                  [("d", "f"), ("f", "f/inner", b"i")],
                  [("f", "f", b"2")])
    assert set(tree) == {"f"} and tree["f"][1] == b"2"


def test_directory_merge_keeps_lower_files_with_the_upper_attributes():
    tree = merged([("d", "m", 0o700), ("f", "m/a", b"a")], [("d", "m", 0o751), ("f", "m/b", b"b")])
    assert set(tree) == {"m", "m/a", "m/b"} and tree["m"][0].mode == 0o751


def test_hard_link_into_a_lower_layer():
    tree = merged([("d", "h"), ("f", "h/orig", b"data")], [("h", "h/link", "h/orig")])
    assert tree["h/orig"][1] == b"data"
    assert tree["h/link"][0].islnk() and tree["h/link"][0].linkname == "h/orig"


def test_hard_link_whose_first_name_a_later_layer_deletes_keeps_the_content():
    tree = merged([("d", "k"), ("f", "k/a", b"A")], [("h", "k/b", "k/a"), ("h", "k/c", "k/a")],
                  [("f", "k/.wh.a", b"")])
    assert "k/a" not in tree
    assert tree["k/b"][1] == b"A"
    assert tree["k/c"][0].islnk() and tree["k/c"][0].linkname == "k/b"


def test_each_layer_is_read_once():
    """The merge is one pass: every layer's feeder (a registry download, an inflate) runs once."""
    calls: list[int] = []
    stack = as_layers([("d", "a", 0o700), ("f", "a/x", b"x"), ("f", "a/y", b"y"), ("h", "a/z", "a/x")],
                      [("f", "a/.wh.y", b""), ("f", "b", b"b")], [("h", "c", "a/x"), ("f", "a/.wh.x", b"")])
    for i, layer in enumerate(stack):
        layer.feed = lambda out, feed=layer.feed, i=i: (calls.append(i), feed(out))
    buf = io.BytesIO()
    merge(stack, buf)
    assert sorted(calls) == [0, 1, 2]
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert sorted(tar.getnames()) == ["a", "a/z", "b", "c"]


def test_a_file_deleted_above_keeps_its_content_for_a_link_later_in_its_own_layer():
    """The file has gone by when its layer names the link: that one layer is read again for it."""
    calls: list[int] = []
    stack = as_layers([("d", "k"), ("f", "k/a", b"A"), ("h", "k/b", "k/a")], [("f", "k/.wh.a", b"")])
    for i, layer in enumerate(stack):
        layer.feed = lambda out, feed=layer.feed, i=i: (calls.append(i), feed(out))
    buf = io.BytesIO()
    merge(stack, buf)
    assert sorted(calls) == [0, 0, 1]
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert sorted(tar.getnames()) == ["k", "k/b"]
        assert tar.extractfile("k/b").read() == b"A"


def test_a_directory_a_layer_names_only_by_a_whiteout_in_it_stays():
    tree = merged([("d", "a", 0o700), ("f", "a/x", b"x")], [("f", "a/.wh.x", b"")])
    assert set(tree) == {"a"} and tree["a"][0].mode == 0o755   # made by the upper layer (overlayfs)


def test_hard_link_keeps_the_content_its_layer_saw_when_a_later_layer_replaces_the_target():
    tree = merged([("d", "r"), ("f", "r/a", b"old")], [("h", "r/b", "r/a")], [("f", "r/a", b"new")])
    assert tree["r/a"][1] == b"new" and tree["r/b"][1] == b"old"


def test_parents_named_by_no_layer_are_made():
    tree = merged([("f", "x/y/z", b"z")])
    assert tree["x"][0].isdir() and tree["x/y"][0].isdir() and tree["x"][0].mode == 0o755


def test_hard_link_to_nothing_is_refused():
    with pytest.raises(LayerError, match="hard link to /nowhere"):
        merged([("h", "a", "nowhere")])


def test_members_whose_names_disagree_are_refused():
    """A pax ``path`` and a GNU long name that differ: tools would file the member differently."""
    gnu = tarfile.TarInfo("x" * 120).tobuf(format=tarfile.GNU_FORMAT)    # an 'L' block, then a header
    info = tarfile.TarInfo("a")
    info.pax_headers = {"path": "etc/other"}
    pax = gnu[:-512] + info.tobuf(format=tarfile.PAX_FORMAT) + bytes(1024)
    layer = Layer(digest=sha(pax), size=len(pax), media_type="application/vnd.oci.image.layer.v1.tar",
                  feed=lambda o: o.write(pax), where="layer 1")
    with pytest.raises(LayerError, match="names disagree"):
        merge([layer], io.BytesIO())


@pytest.mark.parametrize("media_type", ["application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                        "application/vnd.dev.cosign.simplesigning.v1+json"])
def test_what_is_not_a_layer_is_refused(media_type):
    with pytest.raises(LayerError, match="not a container image layer"):
        merge(as_layers([("f", "a", b"a")], media_type=media_type), io.BytesIO())


def test_foreign_layers_are_refused():
    with pytest.raises(LayerError, match="foreign layer"):
        merge(as_layers([("f", "a", b"a")],
                        media_type="application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"), io.BytesIO())


def test_the_feeders_error_wins_over_the_broken_stream():
    """A feeder that fails half-way (a digest mismatch found at the end, a dropped connection):
    its error is the one raised, not the tar reader's "stream ended"."""
    data = layer_tar([("f", "a", b"a" * 100_000)])

    def feed(out):
        out.write(data[:5000])
        raise LayerError("layer 1 is damaged: test")

    with pytest.raises(LayerError, match="damaged: test"):
        merge([Layer(digest=sha(data), size=len(data), media_type="application/vnd.oci.image.layer.v1.tar",
                     feed=feed, where="layer 1")], io.BytesIO())


def test_gzip_layers_are_decompressed():
    import gzip

    data = gzip.compress(layer_tar([("f", "g", b"zipped")]))
    buf = io.BytesIO()
    merge([Layer(digest=sha(data), size=len(data), media_type=sorted(L.GZIP_TYPES)[0], feed=lambda o: o.write(data), where="layer 1")], buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert tar.extractfile("g").read() == b"zipped"


@pytest.mark.parametrize("tool", ["igzip", "pigz", "gzip"])
def test_each_inflater_reads_a_layer_and_refuses_a_damaged_one(tool, monkeypatch):
    """Whichever inflater is installed (igzip first, then pigz, then gzip): a good layer reads, and
    one whose stored CRC is wrong (its digest names the damaged bytes, so only the inflater can
    tell) fails with one error."""
    import gzip
    import shutil

    found = shutil.which(tool)
    need(None if found else f"{tool} is not installed (scripts/setup-test.sh installs isal and pigz)")
    monkeypatch.setattr(L.shutil, "which", lambda name: found if name in (tool, "gzip") else None)
    assert L._decompressor(sorted(L.GZIP_TYPES)[0])[0] == found
    good = gzip.compress(layer_tar([("f", "g", b"zipped" * 1000)]))
    bad = bytearray(good)
    bad[-8] ^= 0xFF                  # the CRC-32 in the gzip trailer
    for data, ok in ((good, True), (bytes(bad), False)):
        layer = Layer(digest=sha(data), size=len(data), media_type=sorted(L.GZIP_TYPES)[0],
                      feed=lambda o, d=data: o.write(d), where="layer 1")
        buf = io.BytesIO()
        if ok:
            merge([layer], buf)
            buf.seek(0)
            with tarfile.open(fileobj=buf) as tar:
                assert tar.extractfile("g").read() == b"zipped" * 1000
        else:
            with pytest.raises(LayerError, match="does not decompress"):
                merge([layer], buf)
