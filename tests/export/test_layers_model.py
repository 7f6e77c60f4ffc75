"""The one-pass merge (newest layer first) against a model that applies the layers the plain way:
oldest first, onto an in-memory tree, the way overlayfs shows them (image-spec layer.md's changeset
rules). The layers are random but shaped as builders write them: a directory before what it
holds, whiteouts first in their directory, one member per path, and a hard link only to a file
that exists when its layer is applied. The trees must agree on every name, type, mode, content,
symlink target and hard-link group."""

from __future__ import annotations

import io
import random
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.export.layers import Layer, merge

from helpers.layered import layer_tar, sha

NAMES = ("a", "b", "c")
DEPTH = 3


class Inode:
    """A non-directory; hard links share one."""

    def __init__(self, kind: str, mode: int, payload: bytes | str) -> None:
        self.kind, self.mode, self.payload = kind, mode, payload


class Model:
    def __init__(self) -> None:
        self.tree: dict[str, Inode | int] = {}      # a directory is its mode

    def drop(self, path: str) -> None:
        for name in [n for n in self.tree if n == path or n.startswith(path + "/")]:
            del self.tree[name]

    def parents(self, path: str, here: set[str]) -> None:
        bits = path.split("/")
        for i in range(1, len(bits)):
            anc = "/".join(bits[:i])
            if anc not in here:        # made by this layer: overlayfs shows the upper directory
                here.add(anc)
                if not isinstance(self.tree.get(anc), int):
                    self.drop(anc)
                self.tree[anc] = 0o755

    def files(self) -> list[str]:
        return sorted(n for n, v in self.tree.items() if isinstance(v, Inode))


def _sort_key(member: tuple) -> tuple[str, ...]:
    # Tar order as a builder walks a tree: a directory before its contents, whiteouts first in it.
    return tuple("\0" + b if b.startswith(".wh.") else b for b in member[1].split("/"))


def random_layers(rng: random.Random, model: Model) -> list[list[tuple]]:
    layers = []
    for _ in range(rng.randint(1, 4)):
        paths = {"/".join(rng.choice(NAMES) for _ in range(rng.randint(1, DEPTH))) for _ in range(rng.randint(0, 8))}
        members: list[tuple] = []
        for path in sorted(paths):
            head, _, base = path.rpartition("/")
            roll = rng.random()
            if roll < 0.15:
                members.append(("w", f"{head}/.wh.{base}" if head else f".wh.{base}"))
            elif roll < 0.22:
                members.append(("w", f"{path}/.wh..wh..opq"))
            elif roll < 0.45:
                members.append(("d", path, rng.choice((0o755, 0o700, 0o750))))
            elif roll < 0.6:
                members.append(("l", path, rng.choice(NAMES)))
            elif roll < 0.8:
                members.append(("h", path))
            else:
                members.append(("f", path, rng.choice((b"", b"x", b"yy", b"zzz")), rng.choice((0o644, 0o600))))
        members.sort(key=_sort_key)
        here: set[str] = set()
        nondir: set[str] = set()
        out = []
        for m in members:
            path = m[1]
            bits = path.split("/")
            if any("/".join(bits[:i]) in nondir for i in range(1, len(bits))):
                continue            # inside something this layer made a file: no builder writes that
            model.parents(path, here)
            if m[0] == "w":
                head, _, base = path.rpartition("/")
                if base == ".wh..wh..opq":
                    for name in [n for n in model.tree if n.startswith(head + "/")]:
                        del model.tree[name]
                else:
                    model.drop(f"{head}/{base[4:]}" if head else base[4:])
                out.append(("f", path, b""))
                continue
            if m[0] == "d":
                if not isinstance(model.tree.get(path), int):
                    model.drop(path)
                model.tree[path] = m[2]
                here.add(path)
                out.append(m)
                continue
            nondir.add(path)
            if m[0] == "h":
                targets = [t for t in model.files() if t != path]
                if not targets:
                    m = ("f", path, b"no target", 0o644)
                else:
                    target = rng.choice(targets)
                    inode = model.tree[target]
                    model.drop(path)
                    model.tree[path] = inode
                    out.append(("h", path, target))
                    continue
            model.drop(path)
            model.tree[path] = (Inode("link", 0o777, m[2]) if m[0] == "l" else Inode("file", m[3], m[2]))
            out.append(m)
        layers.append(out)
    return layers


def merged_tree(layers: list[list[tuple]]) -> dict[str, tuple]:
    stack = []
    for i, members in enumerate(layers):
        data = layer_tar(members)
        stack.append(Layer(digest=sha(data), size=len(data), media_type="application/vnd.oci.image.layer.v1.tar",
                           feed=lambda o, d=data: o.write(d), where=f"layer {i + 1}"))
    buf = io.BytesIO()
    merge(stack, buf)
    buf.seek(0)
    out: dict[str, tuple] = {}
    group: dict[str, str] = {}
    with tarfile.open(fileobj=buf) as tar:
        infos = list(tar)
        assert len({i.name for i in infos}) == len(infos), "a name twice"
        by_name = {i.name: i for i in infos}
        for info in infos:
            if info.isdir():
                out[info.name] = ("dir", info.mode)
                continue
            content = by_name[info.linkname] if info.islnk() else info
            group[info.name] = group.get(content.name, content.name)
            payload = tar.extractfile(content).read() if content.isfile() else content.linkname
            out[info.name] = ("link" if content.issym() else "file", content.mode, payload)
    groups: dict[str, list[str]] = {}
    for name, first in group.items():
        groups.setdefault(first, []).append(name)
    return {n: (*v, tuple(sorted(groups[group[n]]))) if n in group else v for n, v in out.items()}


def model_tree(model: Model) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for name, value in model.tree.items():
        if isinstance(value, int):
            out[name] = ("dir", value)
        else:
            out[name] = (value.kind, value.mode, value.payload,
                         tuple(sorted(n for n, v in model.tree.items() if v is value)))
    return out


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_the_one_pass_merge_gives_the_tree_of_applying_the_layers_in_order(seed):
    model = Model()
    layers = random_layers(random.Random(seed), model)
    assert merged_tree(layers) == model_tree(model)
