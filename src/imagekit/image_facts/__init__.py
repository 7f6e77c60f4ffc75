"""The image-facts contract: every ``io.imagekit.*`` label, named and parsed here only.

The build side writes what it knows about a resolved stack into image labels
(:mod:`imagekit.image_facts.writer`); the run side (report, check, preflight,
launch, validate) reads them back as one typed :class:`ImageFacts`, from an
engine image, an exported Enroot ``.sqsh`` or a ``.sif``
(:mod:`imagekit.image_facts.reader`). This module needs neither a stack nor an
engine: both halves import it, and it imports neither. Sites that read the labels themselves find the schema
in docs/check.md ("Image labels"); its version is ``io.imagekit.schema``.

The image's environment (``Config.Env``) is read in the same pass, from the same
places: a runtime acts on some of it before the container starts (Enroot's GPU
hook reads ``NVIDIA_VISIBLE_DEVICES``), so preflight needs it beside the labels.

Schema history:

- 1 (no ``io.imagekit.schema`` label): stack, version, arch, components,
  ``component.<name>.<key>``, target, recipe.sha256, checks. Roles and the
  benchmark are derived from the component names when such an image is read.
- 2: adds ``schema``, ``role.<role>`` (the component that fills it),
  ``role.<role>.version`` (only where it differs from the component's version)
  and ``benchmark`` (JSON: command and environment). Later, as optional labels that older
  readers ignore (so the schema number stayed): ``packages.runtime`` and ``packages.devel``
  (the stack's own distro packages) and ``component.<name>.origin`` (where a site component
  came from; shipped components have none).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from imagekit import __version__
from imagekit.util import quoting
from imagekit.util.errors import UsageError

SCHEMA = 2
PREFIX = "io.imagekit."
SCHEMA_LABEL = PREFIX + "schema"
STACK, VERSION, ARCH, COMPONENTS = (PREFIX + k for k in ("stack", "version", "arch", "components"))
TARGET, RECIPE_SHA256, CHECKS, BENCHMARK = (PREFIX + k for k in ("target", "recipe.sha256", "checks", "benchmark"))
BASE, BASE_MIRROR, BASE_COMPONENTS = (PREFIX + k for k in ("base", "base.mirror", "base.components"))
# The stack file's own distro packages (its `packages:` key), comma-separated, per stage.
PACKAGES = {stage: PREFIX + f"packages.{stage}" for stage in ("runtime", "devel")}
FILE_SUFFIXES = (".sqsh", ".squashfs", ".sif")
# Schema 1 had no roles; they follow from the component names. Frozen here as data (as
# container-structure-test freezes its old schemas), never derived from today's component classes:
# a component whose ``provides`` changes must not change what old labels mean. imagekit's own names
# (the twelve components of ddad1c7, where schema 2 replaced schema 1: later components never wrote
# schema 1), then names that labels written by hand or by other tools used, which preflight
# understood then and still does.
SCHEMA1_ROLES: dict[str, tuple[str, ...]] = {
    "cuda": ("cuda",), "gdrcopy": ("gdrcopy",), "horovod": ("horovod",), "nccl": ("nccl",),
    "nccl-tests": (), "ofed": ("rdma",), "openmpi": ("mpi",), "pmix": ("pmix",),
    "python": ("python", "python-env"), "pytorch": ("pytorch",), "sshd": ("sshd",), "ucx": ("ucx",),
    "mpich": ("mpi",), "mvapich2": ("mpi",), "intel-mpi": ("mpi",), "mlnx-ofed": ("rdma",),
    "doca-ofed": ("rdma",), "rdma-core": ("rdma",), "openssh": ("sshd",), "openssh-server": ("sshd",),
}
# The benchmarks a schema-1 image implied (nccl-tests' all_reduce; python's mpi4py ring test).
SCHEMA1_NCCL_TESTS = (("all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "1"), {"NCCL_DEBUG": "INFO"})
SCHEMA1_MPI4PY = (("python3", "-m", "mpi4py.bench", "ringtest", "-n", "1024", "-l", "1000"), {})


class LabelSchemaError(UsageError):
    """Labels this imagekit cannot read (a newer schema, or damaged values)."""


def component_label(name: str, key: str) -> str:
    return f"{PREFIX}component.{name}.{key}"


def role_label(role: str, key: str | None = None) -> str:
    return f"{PREFIX}role.{role}" + (f".{key}" if key else "")


# -- the .sqsh form: labels as comments at the top of Enroot's /etc/rc -------------------------
#
# Enroot's import writes each label as one comment line, ``# KEY VALUE`` (src/docker.sh), then a
# blank line, before the script; imagekit's export writes the same (sorted), and reads them back
# from a .sqsh here. Only "\n" ends a line, for the shell and for this reader: str.splitlines()
# would also break a line at U+2028/U+2029/U+0085, VT, FF or FS/GS/RS, which would lose every
# later label or let one label's value forge another. What one such line cannot carry (a line
# break in a value, whitespace in a key) is refused when the file is written, never changed.

_RC_KEY_BAD = re.compile(r"[\s\x00-\x1f\x7f]")


def check_rc_label(key: str, value: str, where: str = "image") -> None:
    """Refuse a label that would not read back as itself from a ``# KEY VALUE`` line."""
    quoting.valid_text(key, where, "label name")
    hint = ("Enroot's .sqsh keeps each label as one `# NAME VALUE` comment line at the top of /etc/rc; "
            "rebuild the image without that label (a label a base image set is replaced by a LABEL "
            "of the same name)")
    m = _RC_KEY_BAD.search(key)
    if not key or m:
        raise quoting.UnsafeValue(where, "label name", key,
                                  "is empty" if not key else
                                  f"contains {m.group()!r}: in /etc/rc a label's name ends at its line's first space",
                                  hint)
    field = f"label {quoting.shown(key)}"
    quoting.valid_text(value, where, field)
    for what, text in (("label name", key), (field, value)):
        try:  # read back as UTF-8: bytes that are not (argv's surrogate escapes) would come back changed
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise quoting.UnsafeValue(where, what, text, "is not UTF-8 text", hint) from None
    for ch in ("\n", "\r"):
        if ch in value:
            raise quoting.UnsafeValue(where, field, value,
                                      f"contains {ch!r}, which would end its comment line in /etc/rc "
                                      "(Enroot makes it a space; imagekit refuses rather than change the value)",
                                      hint)


def rc_label_lines(labels: dict[str, str], where: str = "image") -> str:
    """The top of /etc/rc for ``labels``: ``# KEY VALUE`` a line, sorted, then a blank line."""
    for key, value in labels.items():
        check_rc_label(key, value, where)
    head = "".join(f"# {key} {value}\n" for key, value in sorted(labels.items()))
    return head + "\n" if head else ""


def rc_labels(text: str) -> dict[str, str]:
    """The labels at the top of an /etc/rc, Enroot's or imagekit's: every line up to the first that
    is not a ``# `` comment, the key up to the line's first space."""
    labels: dict[str, str] = {}
    for line in text.split("\n"):
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(" ")
        labels[key] = value
    return labels


# -- reading ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ComponentFacts:
    name: str
    version: str
    source: str
    facts: dict[str, str] = field(default_factory=dict)

    def fact(self, key: str) -> str | None:
        return self.facts.get(key)


@dataclass(frozen=True)
class Role:
    component: str
    version: str | None


@dataclass(frozen=True)
class Benchmark:
    command: list[str]
    env: dict[str, str]


@dataclass
class ImageFacts:
    """What an image's labels say; ``labels`` is None when they could not be read (``reason`` says why).

    ``env`` is the image's environment (NAME -> value); None when it could not be read.
    """

    ref: str = ""
    labels: dict[str, str] | None = None
    reason: str = ""
    schema: int | None = None
    stack: str | None = None
    target: str | None = None
    arch: str | None = None
    imagekit_version: str | None = None
    recipe_sha256: str | None = None
    components: dict[str, ComponentFacts] = field(default_factory=dict)
    roles: dict[str, Role] = field(default_factory=dict)
    checks: list[dict] | None = None
    benchmark: Benchmark | None = None
    base_components: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    # The engine's own record of the image's architecture (its config), "arm64"; None for file
    # images, whose architecture is known from the arch label alone.
    config_arch: str | None = None
    packages: dict[str, list[str]] = field(default_factory=dict)   # stage -> the stack's own packages

    @property
    def known(self) -> bool:
        """True when the labels describe components (an imagekit-built image)."""
        return bool(self.labels) and bool(self.components)

    def provider(self, role: str) -> ComponentFacts | None:
        """The component that fills ``role`` in this image, or None."""
        filled = self.roles.get(role)
        return self.components.get(filled.component) if filled else None

    def role_version(self, role: str) -> str | None:
        filled = self.roles.get(role)
        return filled.version if filled else None

    def has_role(self, *roles: str) -> bool:
        return any(r in self.roles for r in roles)

    def version(self, component: str) -> str | None:
        comp = self.components.get(component)
        return comp.version if comp else None

    def fact(self, component: str, key: str) -> str | None:
        comp = self.components.get(component)
        return comp.fact(key) if comp else None

    def as_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "schema": self.schema, "stack": self.stack, "target": self.target,
                "arch": self.arch, "imagekit_version": self.imagekit_version,
                "recipe_sha256": self.recipe_sha256,
                "components": [{"name": c.name, "version": c.version, "source": c.source, "facts": c.facts}
                               for c in self.components.values()],
                "packages": self.packages,
                "roles": {r: {"component": v.component, "version": v.version} for r, v in self.roles.items()}}


def from_labels(labels: dict[str, str] | None, *, ref: str = "", reason: str = "",
                env: dict[str, str] | None = None) -> ImageFacts:
    """Parse labels of any schema this imagekit knows; older schemas are read as the current one.
    ``env`` is the image's environment, read beside the labels (None: not read)."""
    if labels is None:
        return ImageFacts(ref=ref, reason=reason, env=env)
    schema = _schema(labels, ref)
    names = [n.strip() for n in labels.get(COMPONENTS, "").split(",") if n.strip()]
    for key in labels:  # a component whose name the list lost still counts
        m = re.fullmatch(re.escape(PREFIX) + r"component\.([^.]+)\.version", key)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    components = {}
    for name in names:
        head = f"{PREFIX}component.{name}."
        facts = {k[len(head):]: v for k, v in labels.items()
                 if k.startswith(head) and k[len(head):] not in ("version", "source")}
        components[name] = ComponentFacts(name, labels.get(head + "version", ""), labels.get(head + "source", ""),
                                          facts)
    facts = ImageFacts(
        ref=ref, labels=dict(labels), reason=reason, schema=schema, stack=labels.get(STACK),
        target=labels.get(TARGET), arch=labels.get(ARCH), imagekit_version=labels.get(VERSION),
        recipe_sha256=labels.get(RECIPE_SHA256), components=components,
        base_components=[c for c in labels.get(BASE_COMPONENTS, "").split(",") if c], env=env,
        packages={stage: [p for p in labels.get(label, "").split(",") if p] for stage, label in PACKAGES.items()
                  if labels.get(label)})
    if schema >= 2:
        facts.roles = {}
        for key, name in labels.items():
            m = re.fullmatch(re.escape(PREFIX) + r"role\.([^.]+)", key)
            if m:
                version = labels.get(role_label(m.group(1), "version")) or facts.version(name)
                facts.roles[m.group(1)] = Role(name, version)
        facts.benchmark = _benchmark(labels.get(BENCHMARK), ref)
    else:
        facts.roles, facts.benchmark = _schema1_roles(components)
    facts.checks = _checks(labels.get(CHECKS), ref)
    return facts


def _schema(labels: dict[str, str], ref: str) -> int:
    raw = labels.get(SCHEMA_LABEL)
    if raw is None:
        return 1
    if not raw.isdigit():
        raise LabelSchemaError(f"{ref or 'the image'}: label {SCHEMA_LABEL}={raw!r} is not a schema number",
                               "rebuild the image with imagekit")
    if int(raw) > SCHEMA:
        raise LabelSchemaError(
            f"{ref or 'the image'} was built by a newer imagekit (label schema {raw}); this imagekit "
            f"{__version__} reads label schemas 1 to {SCHEMA}",
            "upgrade imagekit (`pip install -U imagekit`), or rebuild the image with this one")
    return int(raw)


def _schema1_roles(components: dict[str, ComponentFacts]) -> tuple[dict[str, Role], Benchmark | None]:
    """Schema 1 recorded no roles: they follow from the component names imagekit knew then."""
    roles: dict[str, Role] = {}
    for name, comp in components.items():
        for role in SCHEMA1_ROLES.get(name, ()):
            roles.setdefault(role, Role(name, comp.version))
    bench = None
    if "nccl-tests" in components:
        bench = Benchmark(list(SCHEMA1_NCCL_TESTS[0]), dict(SCHEMA1_NCCL_TESTS[1]))
    elif "mpi4py" in (components.get("python") or ComponentFacts("", "", "")).facts.get("packages", "").split(","):
        bench = Benchmark(list(SCHEMA1_MPI4PY[0]), dict(SCHEMA1_MPI4PY[1]))
    return roles, bench


def _benchmark(raw: str | None, ref: str) -> Benchmark | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        command, env = data["command"], data.get("env") or {}
        if not (isinstance(command, list) and command and all(isinstance(w, str) for w in command)
                and isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError("command must be a list of strings and env a mapping of strings")
    except (ValueError, KeyError, TypeError) as exc:
        raise LabelSchemaError(f"{ref or 'the image'}: label {BENCHMARK} is not a benchmark ({exc})",
                               "give the benchmark after `--`, or rebuild the image") from None
    return Benchmark(list(command), dict(env))


def _checks(raw: str | None, ref: str) -> list[dict] | None:
    if not raw:
        return None
    try:
        checks = json.loads(raw)
    except ValueError as exc:
        raise LabelSchemaError(f"{ref or 'the image'}: label {CHECKS} is not JSON ({exc})",
                               "give the stack: `imagekit check STACK --image IMAGE`") from None
    if not (isinstance(checks, list) and all(isinstance(c, dict) for c in checks)):
        raise LabelSchemaError(f"{ref or 'the image'}: label {CHECKS} is not a list of checks",
                               "give the stack: `imagekit check STACK --image IMAGE`")
    return checks


def probed_mpi(facts: ImageFacts, name: str, version: str) -> ImageFacts:
    """``facts`` plus an MPI found by looking inside an unlabelled image (preflight's probe)."""
    comp = ComponentFacts(name, version, "probed")
    return dataclasses.replace(facts, labels=facts.labels or {}, components={**facts.components, name: comp},
                               roles={**facts.roles, "mpi": Role(name, version)})


def is_file_image(ref: str) -> bool:
    """Pyxis/Apptainer convention: a path (``/``, ``.``) or a .sqsh/.sif file, not an engine image."""
    return ref.startswith(("/", ".")) or ref.endswith(FILE_SUFFIXES)


def parse_env(entries: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` entries (``Config.Env``, or Enroot's ``/etc/environment`` lines) as a mapping.

    A later entry wins, as in Enroot (its hook reads the file bottom-up, first value kept) and
    Docker; lines without ``=`` (blank, comments) are skipped, as Enroot's parser does."""
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep and name and not name.startswith("#"):
            env[name.strip()] = value
    return env
