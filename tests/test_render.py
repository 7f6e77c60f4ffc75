"""Rendering: golden recipes for every shipped variant, determinism, single-stage, plain HPCCM.

Golden files live in tests/golden/<variant>.<docker|singularity> and are
compared byte for byte. After an intended change, regenerate them with

    IMAGEKIT_REGEN_GOLDEN=1 pytest tests/test_render.py

and review the diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imagekit import render, rules
from imagekit.util import platforms
from imagekit.image_facts import writer
from imagekit import stack as stack_mod
from imagekit.components import providers_of, registry
from imagekit.util.errors import StackError, UsageError
from helpers.stack_helpers import CUDA, DEBIAN, write
from helpers import hostile

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "stacks"
GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("IMAGEKIT_REGEN_GOLDEN") == "1"
FORMATS = render.FORMATS


def shipped_variants() -> list[tuple[Path, str]]:
    """(file, golden name) of every shipped variant for every arch it offers, whatever this host's
    arch: the variant's name, with -arm64 for the aarch64 build of a stack that offers several."""
    out = []
    for path in sorted(STACKS.glob("*.yaml")):
        for arch in sorted(_offered(path), key=list(platforms.ARCHES).index):
            platform = str(platforms.of_arch(arch))
            for s in stack_mod.load_all(path, platform):
                golden = s.name + (platforms.tag_suffix(arch) if len(s.arches) > 1 else "")
                PLATFORM[golden] = (s.name, platform)
                out.append((path, golden))
    return out


def _offered(path: Path) -> set[str]:
    return {a for s in stack_mod.load_all(path, None) for a in s.arches}


PLATFORM: dict[str, tuple[str, str]] = {}      # golden name -> (variant, platform)
VARIANTS = shipped_variants()
CASES = [(path, name, fmt) for path, name in VARIANTS for fmt in FORMATS]
IDS = [f"{name}.{fmt}" for _, name, fmt in CASES]


def load(path: Path, name: str):
    variant, platform = PLATFORM[name]
    return stack_mod.load(path, variant if stack_mod.load_all(path)[0].variant else None, platform=platform)


# -- golden ---------------------------------------------------------------

@pytest.mark.parametrize("path, name, fmt", CASES, ids=IDS)
def test_golden(path, name, fmt, monkeypatch):
    """The recipes as shipped: upstream's pins, not the test site's pins of the stand-in mirror."""
    monkeypatch.delenv("IMAGEKIT_SITE", raising=False)
    text = render.render(load(path, name), fmt)
    golden = GOLDEN / f"{name}.{fmt}"
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_bytes(text.encode())
    assert golden.is_file(), f"no golden file {golden}: run IMAGEKIT_REGEN_GOLDEN=1 pytest {__file__}"
    assert golden.read_bytes() == text.encode(), f"{name} ({fmt}) differs from {golden}; if intended, regenerate"


def test_no_stale_golden_files():
    expected = {f"{name}.{fmt}" for _, name, fmt in CASES}
    assert {p.name for p in GOLDEN.iterdir() if p.is_file()} == expected   # launch/ is the launch tests' own


def test_golden_files_have_the_expected_shape():
    # Guards against regenerating nonsense: each golden is a two-stage recipe in its format.
    for _, name, fmt in CASES:
        text = (GOLDEN / f"{name}.{fmt}").read_text()
        assert text.startswith("# imagekit ") and f"stack {PLATFORM[name][0]} (" in text.splitlines()[0]
        assert text.endswith("\n") and not text.endswith("\n\n")
        if fmt == "docker":
            assert text.count("\nFROM ") == 2 and " AS devel\n" in text and " AS runtime\n" in text
            assert 'io.imagekit.target="runtime"' in text
        else:
            assert text.count("\nBootStrap: ") == 2 and "Stage: devel\n" in text and "Stage: runtime\n" in text
            assert "io.imagekit.target runtime" in text
        assert "/work/" not in text and str(REPO) not in text, "recipe text depends on the checkout path"


def test_render_does_not_depend_on_how_the_stack_is_named(monkeypatch):
    monkeypatch.setenv("IMAGEKIT_STACKS", str(STACKS))
    by_name = render.render(stack_mod.load("debian-mpi"))
    monkeypatch.chdir(REPO)
    by_relative_path = render.render(stack_mod.load("stacks/debian-mpi.yaml"))
    by_absolute_path = render.render(stack_mod.load(STACKS / "debian-mpi.yaml"))
    assert by_name == by_relative_path == by_absolute_path


# -- determinism ----------------------------------------------------------

def test_render_twice_is_identical():
    for path, name in VARIANTS:
        s = load(path, name)
        for fmt in FORMATS:
            assert render.render(s, fmt) == render.render(s, fmt)


def test_format_a_then_b_then_a_is_identical():
    for path, name in VARIANTS:
        s = load(path, name)
        docker1 = render.render(s, "docker")
        sing1 = render.render(s, "singularity")
        docker2 = render.render(s, "docker")
        sing2 = render.render(s, "singularity")
        assert docker1 == docker2 and sing1 == sing2
        assert docker1 != sing1


def test_hpccm_globals_do_not_leak_between_stacks():
    # Render every variant in one order, then in the reverse order with formats interleaved:
    # arch/distro/format set by one render must not reach the next one.
    forward = {(n, f): render.render(load(p, n), f) for p, n, f in CASES}
    backward = {(n, f): render.render(load(p, n), f) for p, n, f in reversed(CASES)}
    assert forward == backward
    arm = forward[("nccl-tests-cu129-sbsa", "docker")]
    x86 = forward[("nccl-tests-cu129-x86_64", "docker")]
    assert "arm64-sbsa" in arm and "arm64-sbsa" not in x86
    assert "x86_64" in x86.split("io.imagekit.arch=")[1][:10]


def test_hpccm_global_state_is_reset_even_after_direct_hpccm_use():
    import hpccm
    import hpccm.config
    from hpccm.primitives import baseimage

    s = load(STACKS / "debian-mpi.yaml", "debian-mpi")
    before = render.render(s, "docker")
    hpccm.config.set_container_format("singularity")
    stage = hpccm.Stage()
    stage += baseimage(image="centos:7", _arch="aarch64")  # flips distro and arch globals
    str(stage)
    assert render.render(s, "docker") == before


# -- single stage ---------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_single_stage_renders_only_devel(fmt):
    for path, name in VARIANTS:
        s = load(path, name)
        full = render.render(s, fmt)
        single = render.render(s, fmt, single_stage=True)
        assert full.startswith(single[:-1])
        assert len(single) < len(full)
        if fmt == "docker":
            assert single.count("FROM ") == 1 and "AS runtime" not in single
            assert 'io.imagekit.target="devel"' in single
        else:
            assert single.count("BootStrap:") == 1 and "Stage: runtime" not in single
            assert "io.imagekit.target devel" in single


def test_unknown_format():
    s = load(STACKS / "debian-mpi.yaml", "debian-mpi")
    with pytest.raises(UsageError, match="unknown format 'podman'"):
        render.render(s, "podman")


# -- labels ---------------------------------------------------------------

def test_labels_name_every_component_version_and_source():
    s = load(STACKS / "debian-mpi.yaml", "debian-mpi")
    labels = writer.recipe_labels(s)
    assert labels["io.imagekit.stack"] == "debian-mpi"
    assert labels["io.imagekit.components"] == "sshd,ofed,ucx,pmix,openmpi,nccl,python"
    assert labels["io.imagekit.component.openmpi.pmix"] == "true"
    assert labels["io.imagekit.component.pmix.version"] == "4.2.2"
    assert labels["io.imagekit.component.nccl.source"] == "pypi"
    assert "io.imagekit.component.python.pip" not in labels, "empty facts are left out"
    for name in s.components:
        assert f"io.imagekit.component.{name}.version" in labels
        assert f"io.imagekit.component.{name}.source" in labels


def test_label_values_are_quoted_for_docker_only(tmp_path):
    s = stack_mod.load(write(tmp_path, DEBIAN + 'description: "two words, and \\"quotes\\""\n'))
    docker = render.render(s, "docker")
    assert 'org.opencontainers.image.description="two words, and \\"quotes\\""' in docker
    sing = render.render(s, "singularity")
    assert 'org.opencontainers.image.description two words, and "quotes"' in sing


def test_recipe_hash_is_sha256_of_the_text():
    import hashlib

    assert render.recipe_hash("x\n") == hashlib.sha256(b"x\n").hexdigest()


# -- plain HPCCM ----------------------------------------------------------

def hpccm_cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("hpccm")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "hpccm.cli"]
    return subprocess.run([*cmd, "--recipe", str(REPO / "recipes" / "stack.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


@pytest.mark.parametrize("path, name, fmt", CASES, ids=IDS)
def test_plain_hpccm_matches_imagekit_render(path, name, fmt):
    variant, platform = PLATFORM[name]
    userargs = [f"stack=stacks/{path.name}", f"platform={platform}"]
    if load(path, name).variant:
        userargs.append(f"variant={variant}")
    extra = ["--format", "singularity", "--singularity-version", "3.2"] if fmt == "singularity" else []
    out = hpccm_cli("--userarg", *userargs, *extra)
    assert out.returncode == 0, out.stderr
    # hpccm prints the recipe (print adds "\n"); render() ends with exactly one "\n": same bytes.
    assert out.stdout == render.render(load(path, name), fmt)


def test_plain_hpccm_singularity_without_version_is_raised_to_3_2():
    out = hpccm_cli("--userarg", "stack=stacks/debian-mpi.yaml", "--format", "singularity")
    assert out.returncode == 0, out.stderr
    assert "using --singularity-version 3.2" in out.stderr
    assert out.stdout == render.render(load(STACKS / "debian-mpi.yaml", "debian-mpi"), "singularity")


def test_plain_hpccm_reports_a_stack_error(tmp_path):
    bad = write(tmp_path, DEBIAN + "components:\n  opnempi: {}\n")
    out = hpccm_cli("--userarg", f"stack={bad}")
    assert out.returncode != 0
    assert f"{bad}:6: components.opnempi: unknown key" in out.stderr


# -- generated stacks -----------------------------------------------------

HEADERS = [DEBIAN, CUDA, CUDA.replace("  distro: ubuntu22\n", "  distro: ubuntu22\n  arch: aarch64\n"),
           DEBIAN.replace("imagekit/debian:bookworm", "rockylinux:9").replace("debian12", "rockylinux9")]
# Mostly valid values, so that many generated stacks render; some junk, so that errors are exercised.
GOOD_VERSION = {"ofed": "2.9.1", "gdrcopy": "2.4.4", "ucx": "1.17.0", "pmix": "4.2.9", "openmpi": "4.1.7",
                "nccl": "2.23.4-1", "nccl-tests": "2.13.11", "pytorch": "2.5.1"}
BAD_VERSIONS = st.sampled_from(["5.0.5", "12", "abc", "", 12.4, 3, True])


def rarely(draw) -> bool:
    return draw(st.integers(0, 15)) == 0


@st.composite
def component_options(draw, cls):
    opts = {}
    if rarely(draw):
        opts["source"] = draw(st.sampled_from(["upstream", "pypi", "bogus"]))
    elif draw(st.booleans()):
        opts["source"] = draw(st.sampled_from(cls.sources))
    if rarely(draw):
        opts["version"] = draw(BAD_VERSIONS)
    elif cls.name in GOOD_VERSION and draw(st.integers(0, 5)):
        opts["version"] = GOOD_VERSION[cls.name]
    for key, opt in cls.options.items():
        if not draw(st.booleans()):
            continue
        if rarely(draw):
            opts[key] = draw(st.sampled_from(["yes", 1, [1], None, {"a": 1}]))
        elif opt.type is bool:
            opts[key] = draw(st.booleans())
        elif opt.choices:
            opts[key] = draw(st.sampled_from(opt.choices))
        elif opt.type is list:
            opts[key] = draw(st.sampled_from([[], ["numpy"], ["mpi4py", "numpy"], ["torchvision==0.20.1"]]))
        else:
            opts[key] = draw(st.sampled_from(["12", "12.4", "https://example.invalid/{cuda}"]))
    if rarely(draw):
        opts["verison"] = "1"
    return opts


@st.composite
def stacks(draw):
    names = sorted(registry())
    chosen = set(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))))
    if draw(st.integers(0, 3)):
        # Usually add what the chosen components need, so that many stacks get past the rules.
        needs = [(name, providers_of(r.role)[0]) for name, cls in registry().items() for r in cls.requires] \
            + [("nccl", "cuda")]
        while True:
            missing = {dep for comp, dep in needs if comp in chosen and dep not in chosen}
            if not missing:
                break
            chosen |= missing
    header = draw(st.sampled_from(HEADERS))
    components = {n: draw(component_options(registry()[n])) for n in sorted(chosen)}
    if "cuda" in components and "nvidia/cuda" not in header and "version" not in components["cuda"]:
        components["cuda"]["version"] = "12.4.1"
    body = yaml.safe_dump({"components": components}, sort_keys=False) if components else ""
    return header + body


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=stacks())
def test_generated_stacks_render_or_raise_stack_error(text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gen.yaml"
        path.write_text(text)
        try:
            s = stack_mod.load(path)
        except StackError as exc:
            assert str(exc).startswith(str(path)), str(exc)
            assert exc.key, str(exc)
            event("StackError")
            return
        event("rendered")
        rules.enforce(s)
        for fmt in FORMATS:
            first = render.render(s, fmt)
            assert render.render(s, fmt) == first
            assert render.render(s, fmt, single_stage=True) != first
        labels = writer.recipe_labels(s)
        assert labels["io.imagekit.components"] == ",".join(s.components)
        for comp in s.components.values():
            comp.checks()  # must not raise on any accepted stack


# ---------------------------------------------------------------- hostile stack values

def _hostile_stack(field: str, value: str) -> dict:
    data = {"name": "t", "description": "plain", "base": {"image": "imagekit/debian:bookworm", "distro": "debian12"},
            "components": {"python": {"packages": ["mpi4py"], "pip": ["numpy==2.1.3"]}},
            "checks": [{"name": "c", "describe": "d", "run": "true"}], "tags": ["t:1"]}
    target, _, key = field.rpartition(".")
    node = data
    for part in target.split(".") if target else []:
        node = node[int(part)] if part.isdigit() else node[part]
    if isinstance(node.get(key), list):
        node[key] = [value]
    else:
        node[key] = value
    if key in ("file", "absent", "library", "python_import"):
        node.pop("run")  # one kind per check
    return data


def _instructions(dockerfile: str) -> list[str]:
    """Dockerfile instruction keywords, continuation lines joined, comments skipped."""
    logical, current = [], ""
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line
        if line.endswith("\\"):
            current = current[:-1]
            continue
        logical.append(current.split(None, 1)[0])
        current = ""
    return logical


HOSTILE_FIELDS = ["name", "description", "base.image", "base.runtime", "tags", "components.python.packages",
                  "components.python.pip", "checks.0.name", "checks.0.describe", "checks.0.file",
                  "checks.0.absent", "checks.0.library", "checks.0.python_import", "checks.0.expect"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(HOSTILE_FIELDS), value=st.one_of(
    st.sampled_from(hostile.PAYLOADS), hostile.words).filter(
        lambda v: "\udc80" not in v and "\udcff" not in v))
def test_hostile_stack_values_are_refused_or_change_no_recipe_structure(tmp_path, field, value):
    """Any string in a stack file: refused with file, line and key, or the Dockerfile keeps its
    instruction list and the definition file its sections (a value added no line of code), and a
    pip requirement stays one shell word."""
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(_hostile_stack(field, value), allow_unicode=True))
    baseline = stack_mod.load(write(tmp_path, yaml.safe_dump(_hostile_stack(field, "/x" if field.endswith("absent") else "x")),
                                    "base.yaml"))
    try:
        s = stack_mod.load(path)
    except StackError as exc:
        event("refused")
        assert exc.file == str(path) and exc.line is not None and exc.key
        assert "\n" not in exc.message.splitlines()[0]
        return
    event("accepted")
    docker = render.render(s, "docker")
    assert _instructions(docker) == _instructions(render.render(baseline, "docker"))
    sections = [l for l in render.render(s, "singularity").splitlines() if l.startswith(("%", "Bootstrap:", "From:"))]
    assert len(sections) == len([l for l in render.render(baseline, "singularity").splitlines()
                                 if l.startswith(("%", "Bootstrap:", "From:"))])
    if field == "components.python.pip":
        import shlex
        run = next(l for l in docker.split("\nRUN ") if "pip install" in l and "numpy" not in l and "--upgrade" in l)
        run = run.split("\n\n")[0]  # the RUN instruction alone, not the comment of the next
        assert value in shlex.split(run.replace("\\\n", " "))


def test_stack_file_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    path = tmp_path / "stack.yaml"
    path.write_bytes(b"name: t\ndescription: caf\xe9\n")
    with pytest.raises(StackError, match=r"stack.yaml:2: byte b'\\xe9' is not UTF-8"):
        stack_mod.load(path)
