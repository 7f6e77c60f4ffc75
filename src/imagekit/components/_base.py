"""What every component is: the Component base class, its Requires, the roles and sources.

The component modules import this; the package (``imagekit.components``) imports them all and
keeps the registry, so nothing here imports a component.
"""


from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from imagekit import sources
from imagekit.checks import Check, Opens
from imagekit.components import _blocks, _site
from imagekit.util import known_errors
from imagekit.util.errors import StackError
from imagekit.util.schema import Option
from imagekit.util.settings import Site

SOURCES = ("upstream", "distro", "pypi", "repo", "base")

# The roles components fill, and what a provider of each offers the components that use it.
# A role named like a component ("cuda", "pmix") is usually filled by that component alone.
ROLES: dict[str, str] = {
    "cuda": "the CUDA toolkit: .version, .major, .major_minor, .prefix, .check_arch()",
    "rdma": "verbs/RDMA user space (rdma-core or MLNX/DOCA OFED)",
    "gdrcopy": "GDRCopy: .prefix",
    "ucx": "UCX: .prefix (pkg-config and headers under it)",
    "pmix": "an external PMIx that the MPI and Slurm's pmix plugin share: .prefix",
    "mpi": "an MPI with mpicc/mpirun: .home (bin, include, lib), labels `pmix` (true/false)",
    "nccl": "NCCL: .prefix (include/nccl.h, lib/libnccl.so.2)",
    "nccl-net-plugin": "an NCCL network plugin that NCCL loads by NCCL_NET_PLUGIN",
    "libfabric": "libfabric (OFI) and its providers",
    "cxi": "HPE Slingshot's libcxi and the Cassini/CXI uAPI headers libfabric's cxi provider builds on: .prefix",
    "ucc": "UCC collectives (and HCOLL) that the MPI can use",
    "sharp": "SHARP in-network reductions (the NCCL CollNet path, MPI collectives)",
    "python": "Python 3",
    "python-env": "a pip environment (/opt/venv) for components that install Python packages",
    "pytorch": "PyTorch in the pip environment",
    "sshd": "an OpenSSH server for inside-out launches",
}
# Components imagekit no longer ships, with why and what replaces them: a stack naming one is refused
# with this text rather than "unknown key".
RETIRED: dict[str, tuple[str, str]] = {
    "horovod": ("Horovod is dead: its last release, 0.28.1 (2023), does not compile against PyTorch >= 2.1 "
                "(C++14 against C++17 headers, horovod#3996) and no release has the fix",
                "drop `horovod` and use PyTorch's own torch.distributed (DistributedDataParallel or FSDP, "
                "launched with torchrun or one srun rank per GPU), which the `pytorch` component ships: see "
                "the shipped `pytorch` stack"),
}
# Roles one image can fill only once: two MPIs or two NCCLs in one image load the wrong libraries.
EXCLUSIVE_ROLES = ("cuda", "mpi", "ucx", "pmix", "nccl", "nccl-net-plugin")


class Stack(Protocol):
    """What a component may ask of the stack it belongs to (:class:`imagekit.stack.Stack` is one).

    A protocol, not the class: the stack builds its components, so the components must not import
    the stack module back."""

    file: str
    mirror: str | None
    base: Any                     # imagekit.stack.Base: .image, .distro, .arch, .family, ...
    components: dict[str, "Component"]
    site: Site                    # whose pins file pins the release files

    def provider(self, role: str) -> "Component | None": ...


@dataclass(frozen=True)
class Requires:
    """A role this component needs from the stack (only when ``option`` is true, if given)."""

    role: str
    option: str | None = None
    why: str = ""

    def check(self, component: "Component") -> None:
        if self.option and not component.enabled(self.option):
            return
        if component.stack.provider(self.role) is not None:
            return
        what = f"`{component.name}.{self.option}: true`" if self.option else f"`{component.name}`"
        known = defined()
        wanted = (f"the `{self.role}` component" if self.role in known
                  else f"a component that provides `{self.role}`")
        fix = "add " + " or ".join(f"`{n}`" for n, cls in known.items() if self.role in cls.provides) + \
            " to components"
        if self.option:
            fix += f", or set `{self.option}: false` on {component.name}"
        component.error(self.option, f"{what} needs {wanted}" + (f" ({self.why})" if self.why else ""), fix)
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A release as upstreams write it ("4.1.7", "2.23.4-1", "1.2~rc1") or as PEP 440 does for wheels: pre-,
# post- and dev-releases ("2.26.2.post1", "2.0rc1", "1.0.dev3") and local versions ("2.5.1+cu121").
_VERSION = re.compile(r"\d+(\.\d+)*(\.?(a|b|rc|post|dev)\d*)*([-+~][0-9A-Za-z.+~-]*)?$")


class Component:
    """Base class; subclasses set the class attributes and override the stage methods."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # Layer position: rarely-changing, low-level pieces first so that bumping a
    # framework rebuilds only the layers above it.
    order: ClassVar[int] = 50
    # Roles this component fills for others (keys of ROLES): builds against "the stack's MPI" ask for it.
    provides: ClassVar[tuple[str, ...]] = ()
    # Roles it needs from the stack; checked before any build, with the fix.
    requires: ClassVar[tuple[Requires, ...]] = ()
    # Environment a user sets on the host for it (NCCL_IB_HCA, FI_PROVIDER, ...), by prefix: outside-in
    # launchers forward these names into each rank's container.
    forward_env: ClassVar[tuple[str, ...]] = ()
    sources: ClassVar[tuple[str, ...]] = ("upstream",)
    options: ClassVar[dict[str, Option]] = {}
    # Version each distro ships, for `source: distro` (labels and checks use it).
    distro_versions: ClassVar[dict[str, str]] = {}
    # Debian-family packages for `source: distro`: what the runtime stage needs, what devel adds,
    # and the comment above the install.
    distro_packages: ClassVar[tuple[str, ...]] = ()
    distro_devel_packages: ClassVar[tuple[str, ...]] = ()
    distro_note: ClassVar[str] = ""
    # The upstream release file that `source: upstream` builds from: (mirror file name, URL),
    # both with {version}. Components with one get a `sha256:` option and mirror support.
    upstream_file: ClassVar[tuple[str, str] | None] = None
    # Where a site component came from (its file and sha256, or its distribution); None: shipped.
    origin: ClassVar[str | None] = None
    # Known risks a stack may take on knowingly (`accept: [id]`), id -> what is accepted. A rule about
    # one refuses the stack unless it is accepted; the image's labels record what was.
    acceptable: ClassVar[dict[str, str]] = {}
    # CPU architectures (the stack's spelling) this component builds for; ``arch_problem`` refines
    # it per source and version. A stack built for another is refused, naming the component.
    arches: ClassVar[tuple[str, ...]] = ("x86_64", "aarch64")

    def __init__(self, stack: "Stack", opts: dict[str, Any], where: Any = None) -> None:
        self.stack = stack
        self.opts = opts
        self.where = where  # the PosDict of this component's options, for errors

    # -- schema ---------------------------------------------------------
    @classmethod
    def all_options(cls) -> dict[str, Option]:
        common = {
            "source": Option(str, cls.sources[0], "where the component comes from", choices=cls.sources),
            "version": Option(str, None, 'version to install, quoted (e.g. "4.1.7")'),
        }
        if cls.upstream_file:
            common["sha256"] = Option(str, None, "sha256 of the upstream release file (default: imagekit's "
                                                 "pin for this version)")
        if cls.acceptable:
            common["accept"] = Option(list, [], "known risks this stack takes on knowingly: "
                                      + "; ".join(f"{k} ({v})" for k, v in cls.acceptable.items()), item_type=str)
        return {**common, **cls.options}

    def configure(self) -> None:
        """Per-component validation after options are typed; raise with ``self.error``."""
        for risk in self.opts.get("accept") or []:
            if risk not in self.acceptable:
                self.error("accept", f"{self.name} has no risk called {risk!r} to accept",
                           "risks it knows: " + ", ".join(self.acceptable))
        version = self.opts.get("version")
        if version and not _VERSION.match(version):
            # Components parse the version (major for OpenMPI 5/PMIx labels, NCCL's version code):
            # refuse a non-version here rather than crash with a traceback later.
            self.error("version", *known_errors.NOT_A_VERSION.text(version=version))
        if self.source in ("upstream", "pypi", "repo") and not self.opts.get("version"):
            self.error("version", f"`source: {self.source}` needs a pinned version",
                       f'add `version: "X.Y.Z"` to {self.name}')
        if self.opts.get("sha256") and not _SHA256.fullmatch(self.opts["sha256"]):
            # It lands in the recipe's `sha256sum -c` line: only a digest may get there.
            self.error("sha256", f"{self.opts['sha256']!r} is not a sha256 digest",
                       "write the 64 lowercase hex digits `sha256sum FILE` prints")
        if self.upstream_file and self.source == "upstream" and self.opts.get("version") and not self.pin:
            filename, url = (t.format(**self.url_fields()) for t in self.upstream_file)
            pinned = [v for (c, v) in sources.PINS if c == self.name]
            self.error("sha256" if self.where is not None and "sha256" in self.where else "version",
                       f"imagekit has no sha256 pin for {self.name} {self.version} ({url})",
                       f'pin upstream\'s {filename} (`sha256sum {filename}`) for the whole site in the site pins '
                       f'file (--site FILE or ${sources.SITE_ENV}): `pins: {{{self.name}: {{"{self.pin_version}": '
                       f'"<sha256>"}}}}`, or for this stack with `sha256: "<sha256>"` on {self.name}'
                       + ("; or use a version imagekit pins: " + ", ".join(pinned) if pinned else ""))
        if self.source == "distro" and self.stack.base.family != "deb":
            self.error("source", "`source: distro` is only packaged here for Debian/Ubuntu bases",
                       "use `source: upstream` on this base")
        arch = self.stack.base.arch
        problem = self.arch_problem(arch)
        if problem is not None:
            why, fix = problem
            key = "version" if self.where is not None and "version" in self.where else None
            self.error(key, f"{self.name} does not build for {arch}: {why}", fix)

    def arch_problem(self, arch: str) -> tuple[str, str] | None:
        """(why, fix) when this component, as configured, cannot be built for ``arch``; else None."""
        if arch in self.arches:
            return None
        return (f"imagekit builds {self.name} for {', '.join(self.arches)} only",
                f"build this stack for {', '.join(self.arches)}, or drop `{self.name}` from its {arch} build "
                f"(per_arch: {{{arch}: {{components: {{{self.name}: false}}}}}})")

    def check_stack(self) -> None:
        """Rules about this component and the roles it uses, once every component is configured and
        every requirement met; raise with ``self.error``."""

    def accepted(self, risk: str) -> bool:
        return risk in (self.opts.get("accept") or [])

    def refuse_unless_accepted(self, risk: str, key: str | None, message: str, hint: str) -> None:
        """A rule a site may knowingly override: refused with the fix, and `accept: [risk]` as the way out."""
        if not self.accepted(risk):
            self.error(key, message, f"{hint}; or, knowing this, add `accept: [{risk}]` to {self.name}")

    def error(self, key: str | None, message: str, hint: str | None = None) -> StackError:
        file, line = (self.where.pos(key) if (self.where is not None and key in (self.where or {}))
                      else (getattr(self.where, "file", self.stack.file), getattr(self.where, "line", None)))
        raise StackError(message, file=file, line=line,
                         key=f"components.{self.name}" + (f".{key}" if key else ""), hint=hint)

    # -- facts ----------------------------------------------------------
    @property
    def source(self) -> str:
        return self.opts["source"]

    @property
    def version(self) -> str:
        if self.opts.get("version"):
            return self.opts["version"]
        if self.source == "distro":
            return self.distro_versions.get(self.stack.base.distro, "distro")
        return "unknown"

    @property
    def pin_version(self) -> str:
        """The version that names this component's release file in pins (NCCL's carries its revision)."""
        return self.version

    @property
    def pin(self) -> str | None:
        return self.opts.get("sha256") or sources.pin(self.name, self.pin_version, pinnable(self.stack.site), self.stack.site)[0]

    @property
    def pin_origin(self) -> str:
        if self.opts.get("sha256"):
            return f"`sha256:` on {self.name} in {getattr(self.where, 'file', None) or self.stack.file}"
        return sources.pin(self.name, self.pin_version, pinnable(self.stack.site), self.stack.site)[1]

    def artifacts(self) -> list[sources.Artifact]:
        """The upstream files this component's build downloads (taken from the mirror when set)."""
        if not self.upstream_file or self.source != "upstream":
            return []
        filename, url = (t.format(**self.url_fields()) for t in self.upstream_file)
        return [sources.Artifact(self.name, filename, url, self.pin, self.pin_origin, self.pin_version)]

    def url_fields(self) -> dict[str, str]:
        """Placeholders of ``upstream_file``."""
        return {"version": self.version}

    def enabled(self, option: str) -> bool:
        return bool(self.opts.get(option))

    # -- stages ---------------------------------------------------------
    def packages(self, devel: bool) -> list[str]:
        """The distro packages for one stage (``source: distro``), named as the base's distro names them."""
        return _blocks.distro_names(self.stack.base.distro, list(self.distro_packages)
                                    + (list(self.distro_devel_packages) if devel else []))

    def written_packages(self) -> list[tuple[str, str, int]]:
        """Distro packages this component makes from names the stack file wrote, as (package, option,
        index of the item in that option's list): `imagekit build` checks them against the base's
        archive before building (:mod:`imagekit.package_check`), and names the line of a misspelt one."""
        return []

    def building_blocks(self) -> list:
        """HPCCM building blocks for the devel stage; the runtime stage gets their ``runtime()`` twins."""
        return []

    def environment(self) -> dict[str, str]:
        """ENV for both stages, after the install."""
        return {}

    def devel(self) -> list:
        """The devel stage: distro packages (with headers), or the building blocks."""
        if self.source == "distro":
            out = _blocks.apt_install(self.stack, self.packages(devel=True), self.distro_note or None)
        else:
            out = self.building_blocks()
        return out + _blocks.env(self.environment())

    def runtime(self) -> list:
        """The runtime stage: runtime packages only, or what the blocks built, copied from devel."""
        if self.source == "distro":
            out = _blocks.apt_install(self.stack, self.packages(devel=False), self.distro_note or None)
        else:
            # Blocks with a runtime twin (builds); apt steps for build tools have none and stay in devel.
            out = [block.runtime(_from="devel") for block in self.building_blocks() if hasattr(block, "runtime")]
        return out + _blocks.env(self.environment())

    def labels(self) -> dict[str, str]:
        """Facts beyond version and source, as io.imagekit.component.<name>.<key>."""
        return {}

    def install_paths(self) -> tuple[str, ...]:
        """Where this component's own files go when no package manager records them (a build from a
        release tarball, files copied out of wheels): its prefix. The SBOM credits those files to it."""
        prefix = getattr(self, "prefix", None)
        if self.source == "distro" or not isinstance(prefix, str) or prefix in ("/", "/usr", "/usr/local"):
            return ()
        return (prefix,)

    def role_versions(self) -> dict[str, str]:
        """The version of what fills each role this component provides (a bundle such as HPC-X has
        one version and fills "mpi" with the Open MPI it carries)."""
        return {role: self.version for role in self.provides}

    def benchmark(self) -> tuple[list[str], dict[str, str]] | None:
        """(command, extra environment) that `launch --validate` runs by default, for "benchmark" providers."""
        return None

    def checks(self) -> list[Check]:
        return []

    def dlopens(self) -> list[Opens]:
        """The libraries this component's binaries open at run time by name (upstream's ``dlopen``
        calls, each citing its source): the image's ``image.dlopen_closure`` check resolves every
        one its build carries (:mod:`imagekit.checks.dlopen`)."""
        return []

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "source": self.source,
                **({"origin": self.origin} if self.origin else {}),
                **{k: v for k, v in self.opts.items()
                   if k not in ("source", "version") and not (k == "sha256" and v is None)
                   and not (k == "accept" and not v)}}


def defined(site: bool = True) -> dict[str, type[Component]]:
    """Every component class by its stack key, in layer order: the Component subclasses of this
    package defined so far, and (``site``) the site components the registry accepted (they carry
    an ``origin``). The package imports every component module before any stack is read, so this
    is its registry, seen from below without importing the modules, which import this one."""
    found, todo = {}, list(Component.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in vars(cls) and (cls.__module__.startswith(__package__ + ".")
                                    or (site and vars(cls).get("origin"))):
            found[cls.name] = cls
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


_NAME = re.compile(r"[a-z][a-z0-9-]*")


def contract_problems(cls: type[Component]) -> list[str]:
    """What a component class gets wrong about the contract every component keeps (the shipped
    ones' tests hold them to it; a site component is refused at discovery with this list)."""
    out = []
    name = vars(cls).get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return ["`name` must be a lowercase stack key like `hdf5` or `lustre-client`"]
    if not cls.summary:
        out.append("`summary` is empty (imagekit show and the docs list it)")
    if not isinstance(cls.order, int):
        out.append("`order` must be an integer (its layer position)")
    if not cls.sources or not set(cls.sources) <= set(SOURCES):
        out.append(f"`sources` must be some of {', '.join(SOURCES)}")
    for role in (*cls.provides, *(r.role for r in cls.requires)):
        if role not in ROLES:
            out.append(f"role {role!r} is not one of imagekit's roles ({', '.join(ROLES)})")
    for key, opt in cls.options.items():
        if not isinstance(opt, Option):
            out.append(f"option {key!r} is not an imagekit.util.schema.Option")
        elif not (opt.help or opt.type is bool):
            out.append(f"option {key!r} has no help")
        elif opt.choices and opt.default is not None and opt.default not in opt.choices:
            out.append(f"option {key!r}: its default is not one of its choices")
    for r in cls.requires:
        if r.option is not None and r.option not in cls.options:
            out.append(f"requires {r.role!r} when option {r.option!r}, which it does not have")
    return out


def pinnable(site: Site | None = None) -> set[str]:
    """What a site pins file may name: the components with upstream release files, the other source
    trees they build from (a component's ``parts``, e.g. libcxi's Cassini headers), and every site
    component by its name (one no stack has loaded is not run to see whether it has such files)."""
    return ({name for name, cls in defined().items() if cls.upstream_file}
            | {part for cls in defined().values() for part in getattr(cls, "parts", ())}
            | set(_site.found(site)))
