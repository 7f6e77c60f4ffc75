"""The component registry and the Component base class."""

from __future__ import annotations

import pkgutil

import imagekit.components as components_pkg
from imagekit import sources
from imagekit.components import EXCLUSIVE_ROLES, ROLES, SOURCES, Component, providers_of, registry
from helpers.stack_helpers import DEBIAN, load_text


def test_every_module_defines_one_component():
    modules = sorted(m.name for m in pkgutil.iter_modules(components_pkg.__path__) if not m.name.startswith("_"))
    by_module = sorted(cls.__module__.rsplit(".", 1)[1] for cls in registry().values())
    assert by_module == modules
    # A new component is one new module: this list pins the core, not the whole set.
    assert set(registry()) >= {"cuda", "ofed", "gdrcopy", "ucx", "pmix", "openmpi", "nccl", "nccl-tests",
                               "python", "pytorch", "sshd"}


def test_registry_is_in_layer_order():
    orders = [cls.order for cls in registry().values()]
    assert orders == sorted(orders)
    names = list(registry())
    # Low-level pieces first so that bumping a framework rebuilds only the layers above.
    assert names.index("cuda") < names.index("ofed") < names.index("ucx") < names.index("openmpi") \
        < names.index("nccl") < names.index("nccl-tests") < names.index("python") < names.index("pytorch")


def test_component_declarations_are_consistent():
    for name, cls in registry().items():
        assert cls.name == name and cls.summary, name
        assert cls.sources and set(cls.sources) <= set(SOURCES), name
        opts = cls.all_options()
        assert opts["source"].default == cls.sources[0] and opts["source"].choices == cls.sources
        assert {"source", "version"} <= set(opts)
        # Components that build an upstream release file take a sha256 pin for it; the others do not.
        assert ("sha256" in opts) == bool(cls.upstream_file), name
        for key, opt in cls.options.items():
            assert opt.help or opt.type is bool, f"{name}.{key} has no help"
            if opt.choices:
                assert opt.default is None or opt.default in opt.choices


def test_source_builds_declare_their_upstream_file():
    builds = {name for name, cls in registry().items() if cls.upstream_file}
    assert builds >= {"gdrcopy", "ucx", "pmix", "openmpi", "nccl", "nccl-tests"}
    # Every built-in pin belongs to one of them.
    assert {component for component, _ in sources.PINS} <= builds


def test_roles_are_known_and_filled():
    """Every role a component provides or requires is in the ROLES vocabulary, and every required role has
    a provider; the core roles have the providers the rest of imagekit relies on."""
    provided = {role for cls in registry().values() for role in cls.provides}
    required = {r.role for cls in registry().values() for r in cls.requires}
    assert provided <= set(ROLES) and required <= provided
    assert set(EXCLUSIVE_ROLES) <= set(ROLES)
    for role, name in {"mpi": "openmpi", "cuda": "cuda", "rdma": "ofed", "nccl": "nccl", "pmix": "pmix",
                       "ucx": "ucx", "python-env": "python", "sshd": "sshd"}.items():
        assert name in providers_of(role), role
    for cls in registry().values():
        for r in cls.requires:
            assert r.option is None or r.option in cls.options, f"{cls.name}: {r}"


def test_mpi_providers_offer_a_home():
    # nccl-tests builds against "the stack's MPI" through .home (MPI_HOME).
    for name in providers_of("mpi"):
        assert isinstance(getattr(registry()[name], "home", None), property), name


def test_every_component_brings_checks_with_unique_ids(tmp_path):
    s = load_text(tmp_path, DEBIAN + """\
components:
  sshd: {}
  ofed: {}
  ucx: {source: distro}
  pmix: {source: distro}
  openmpi: {source: distro, pmix: true}
  nccl: {source: pypi, version: "2.21.5", cuda: "12"}
  python: {packages: [mpi4py]}
""")
    ids = []
    for comp in s.components.values():
        checks = comp.checks()
        assert checks, f"{comp.name} brings no checks"
        for check in checks:
            assert check.id.startswith(comp.name + ".")
            assert check.describe
            assert check.as_dict()["kind"] in ("run", "file", "absent", "library", "python_import")
        ids += [c.id for c in checks]
    assert len(ids) == len(set(ids))


def test_distro_version_defaults_to_distro_word(tmp_path):
    s = load_text(tmp_path, DEBIAN.replace("debian12", "debian11") + "components:\n  sshd: {}\n")
    assert s.get("sshd").version == "8.4"
    s = load_text(tmp_path, DEBIAN.replace("debian12", "ubuntu20") + "components:\n  sshd: {}\n")
    assert s.get("sshd").version == "distro"


def test_base_component_is_not_registered():
    assert Component not in registry().values()
