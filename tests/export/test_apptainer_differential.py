"""imagekit's SIF against Apptainer's own build of the same image (issue 34): `apptainer build X.sif
docker-daemon://IMAGE` beside `imagekit export IMAGE --to sif`, both run by the real Apptainer 1.4.

The image is the export tests' awkward one (tests/export/conftest.py ``odd_image``: ENV with spaces,
quotes, ``$`` and a backslash, ENTRYPOINT and CMD with arguments, a WORKDIR with a space, labels,
setuid files, foreign owners, hard and symbolic links). Compared: what ``apptainer inspect --all``
reports, the environment a command sees (``apptainer exec --cleanenv``), what ``apptainer run``
does with arguments (evaluated, and with ``--no-eval``), the working directory, and the file tree
of the two squashfs partitions (type, mode, owner, size, link target).

The differences that remain are by design, and listed here so that any other fails the test:

- a declared value that Apptainer's own build changes (it escapes values twice: ``$x`` expands,
  ``\\`` doubles) keeps the image's value, as ``docker run`` shows it;
- the build labels say when each file was built, and no Apptainer built imagekit's
  (``org.label-schema.usage.apptainer.version``); the scripts under ``/.singularity.d`` are
  imagekit's own wording (compared by behaviour, not text);
- the file tree leaves out the image's ``/dev/*`` (Apptainer mounts its own ``/dev``), and the
  ``/etc/hostname`` and ``/etc/mtab`` that ``docker export`` cannot show (Docker's init layer
  hides the image's own; imagekit.export.layers.made_by_docker).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagekit.engines import docker as engine
from imagekit.export import ExportRequest, export_image, sif

pytestmark = pytest.mark.engine

BUILD_LABELS = {"org.label-schema.build-date", "org.label-schema.usage.apptainer.version"}
TREE_DIFFERENCES = re.compile(r"/dev/.*|/etc/hostname|/etc/mtab")
# Set by Apptainer for the file it runs, whichever it is (both files are named image.sif).
PER_FILE = {"APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"}


def apptainer(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["apptainer", *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, f"apptainer {' '.join(args)}: {proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def pair(odd_image, tmp_path_factory) -> dict[str, Path]:
    """{"apptainer": Apptainer's own build, "imagekit": imagekit's export}, each as DIR/image.sif."""
    if shutil.which("apptainer") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Apptainer (bash scripts/setup-cluster.sh builds it)", pytrace=False)
        pytest.skip("no apptainer (bash scripts/setup-cluster.sh)")
    work = tmp_path_factory.mktemp("apptainer-diff")
    files = {"apptainer": work / "apptainer" / "image.sif", "imagekit": work / "imagekit" / "image.sif"}
    for path in files.values():
        path.parent.mkdir()
    apptainer("build", "--force", str(files["apptainer"]), f"docker-daemon://{odd_image}")
    export_image(odd_image, ExportRequest("sif"), files["imagekit"], store=False)
    return files


def declared(image: str) -> dict[str, str]:
    return dict(e.partition("=")[::2] for e in engine.inspect(image).config["Env"])


def test_inspect_shows_the_same_runscript_definition_and_image_labels(pair):
    seen = {k: json.loads(apptainer("inspect", "--all", "--json", str(p)))["data"]["attributes"]
            for k, p in pair.items()}
    theirs, ours = seen["apptainer"], seen["imagekit"]
    assert {k: v for k, v in ours["labels"].items() if k not in BUILD_LABELS} == \
        {k: v for k, v in theirs["labels"].items() if k not in BUILD_LABELS}
    assert set(theirs["labels"]) - set(ours["labels"]) == {"org.label-schema.usage.apptainer.version"}
    assert ours["deffile"] == theirs["deffile"]
    assert set(ours) == set(theirs), (set(ours), set(theirs))


def test_a_command_sees_the_image_environment_as_docker_declares_it(pair, odd_image):
    env = {k: dict(line.partition("=")[::2] for line in apptainer("exec", "--cleanenv", str(p), "env", "-0")
                   .split("\0") if line)
           for k, p in pair.items()}
    theirs, ours = env["apptainer"], env["imagekit"]
    image = declared(odd_image)
    assert set(ours) == set(theirs)
    for name in sorted(set(ours) - PER_FILE):
        want = image[name] if name in image and theirs[name] != image[name] else theirs[name]
        assert ours[name] == want, f"{name}: imagekit {ours[name]!r}, Apptainer {theirs[name]!r}, image {image.get(name)!r}"
    # The case that differs: Apptainer's own build expands `$x` and doubles the backslash.
    assert theirs["QUOTED"] != image["QUOTED"] and ours["QUOTED"] == image["QUOTED"] == 'it\'s "quoted" $x \\ back'


@pytest.mark.parametrize("flags", [(), ("--no-eval",)])
def test_run_passes_arguments_the_same_way(pair, flags, tmp_path):
    args = ["a", "b c", "$HOME", "'q'"]
    outs = {k: apptainer("run", *flags, str(p), *args, cwd=tmp_path) for k, p in pair.items()}
    assert outs["imagekit"] == outs["apptainer"], outs
    assert outs["imagekit"].startswith("ep arg it's a b c ")


@pytest.mark.parametrize("flags", [(), ("--containall",), ("--pwd", "/usr")])
def test_the_working_directory_is_the_same(pair, flags, tmp_path):
    outs = {k: apptainer("exec", *flags, str(p), "pwd", cwd=tmp_path) for k, p in pair.items()}
    assert outs["imagekit"] == outs["apptainer"], outs


def listing(path: Path) -> dict[str, str]:
    """``{path: "mode owner size [-> target]"}`` of the SIF's squashfs (directories without a size: it
    is squashfs's own bookkeeping)."""
    offset = sif.read_sif(path).primary_partition().offset
    out = subprocess.run(["unsquashfs", "-lln", "-o", str(offset), str(path)], capture_output=True, text=True,
                         check=True).stdout
    entries = {}
    for line in out.splitlines():
        m = re.match(r"(\S+) (\S+) +(\S+(?:, *\S+)?) \S+ \S+ squashfs-root(/.*)$", line)
        if not m:
            continue
        mode, owner, size, rest = m.groups()
        name, _, target = rest.partition(" -> ")
        entries[name] = " ".join([mode, owner, "" if mode.startswith("d") else size, target]).strip()
    return entries


def test_the_file_trees_differ_only_where_documented(pair):
    trees = {k: listing(p) for k, p in pair.items()}
    theirs, ours = trees["apptainer"], trees["imagekit"]
    outside = [n for n in set(theirs) | set(ours) if not n.startswith("/.singularity.d/")]
    differ = sorted(n for n in outside if theirs.get(n) != ours.get(n))
    unexplained = [(n, theirs.get(n), ours.get(n)) for n in differ if not TREE_DIFFERENCES.fullmatch(n)]
    assert not unexplained, unexplained
    assert "/etc/mtab" not in ours and "/etc/hostname" not in ours      # Docker's own, left out
    assert len(outside) > 1000
    scripts = {n for n in set(theirs) | set(ours) if n.startswith("/.singularity.d/")}
    # Apptainer's empty env/94-appsbase.sh (SCIF apps, which an image from Docker has none of).
    assert {n for n in scripts if (n in theirs) != (n in ours)} == {"/.singularity.d/env/94-appsbase.sh"}


def test_the_fast_preset_writes_zstd_that_apptainer_runs_with_the_same_tree(pair, odd_image, tmp_path):
    """`--preset fast` (zstd-3, the .sqsh default's compression) is written by `mksquashfs -tar` in
    place at the partition's offset: the real Apptainer runs it, and its tree is the gzip SIF's."""
    fast = tmp_path / "image.sif"
    result = export_image(odd_image, ExportRequest("sif", preset="fast"), fast, store=False)
    info = sif.read_sif(fast)
    part = info.primary_partition()
    assert sif.check_squashfs(fast, part).compressor == "zstd"
    assert result.tool == "mksquashfs" and result.compression == "fast"
    # labels.json carries each export's own build date (BUILD_LABELS), so its size may differ.
    trees = [{k: v for k, v in listing(p).items() if k != "/.singularity.d/labels.json"}
             for p in (fast, pair["imagekit"])]
    assert trees[0] == trees[1] and "/.singularity.d/labels.json" in listing(fast)
    assert apptainer("exec", str(fast), "cat", "/etc/debian_version").strip()
    outs = [apptainer("run", str(p), "a", "b c", cwd=tmp_path) for p in (fast, pair["imagekit"])]
    assert outs[0] == outs[1]
