"""Python 3 from the distro, with distro modules and an optional pip venv.

Distro modules (``packages``) become ``python3-<name>`` packages, built against
the distro's MPI (e.g. python3-mpi4py with Debian's OpenMPI). pip packages go
into a venv at /opt/venv that sees the distro modules; the venv is built in the
devel stage and copied whole into the runtime stage.
"""

from __future__ import annotations


from imagekit import checks
from imagekit.util import quoting
from imagekit.components import _blocks
from imagekit.components._base import Component
from imagekit.util.schema import Option

VENV = "/opt/venv"
# `launch --validate`'s default for a CPU-only MPI image with mpi4py.
MPI4PY_RING = ["python3", "-m", "mpi4py.bench", "ringtest", "-n", "1024", "-l", "1000"]


class Python(Component):
    name = "python"
    summary = "Python 3 (distro), distro modules, and a pip venv at /opt/venv"
    order = 80
    provides = ("python", "python-env")
    sources = ("distro",)
    options = {
        "packages": Option(list, [], "distro modules, e.g. [mpi4py, numpy] -> python3-mpi4py python3-numpy",
                           item_type=str, pattern=r"[a-z0-9][a-z0-9.+-]*",
                           pattern_help="a Debian package name without the python3- prefix, e.g. mpi4py"),
        "pip": Option(list, [], 'pip requirements for /opt/venv, e.g. ["numpy==2.1.3"]', item_type=str),
    }

    def configure(self) -> None:
        super().configure()
        check_requirements(self, "pip")
    distro_versions = {"debian12": "3.11", "debian13": "3.13", "debian11": "3.9", "ubuntu22": "3.10", "ubuntu24": "3.12",
                       "ubuntu20": "3.8"}

    @property
    def venv(self) -> bool:
        """A venv is made when pip packages are asked for, here or by a component that requires one."""
        return bool(self.opts["pip"]) or any(r.role == "python-env" for c in self.stack.components.values()
                                             for r in c.requires)

    def _runtime_packages(self) -> list[str]:
        return ["python3"] + [f"python3-{p}" for p in self.opts["packages"]] + \
            (["python3-venv"] if self.venv else [])

    def devel(self) -> list:
        out = _blocks.apt_install(self.stack, self._runtime_packages() + ["python3-dev", "python3-pip"], "Python (distro)")
        if self.venv:
            out += _blocks.pip_run([f"python3 -m venv --system-site-packages {VENV}",
                                    f"{VENV}/bin/python -m pip install --upgrade pip"]
                                   + ([f"{VENV}/bin/python -m pip install "
                                       + " ".join(quoting.sh_arg(p) for p in self.opts["pip"])]
                                      if self.opts["pip"] else []),
                                   f"pip venv {VENV}")
            out += _blocks.env({"PATH": f"{VENV}/bin:$PATH"})
        return out

    def runtime(self) -> list:
        out = _blocks.apt_install(self.stack, self._runtime_packages(), "Python (distro)")
        if self.venv:
            out += _blocks.copy_from_devel(VENV) + _blocks.env({"PATH": f"{VENV}/bin:$PATH"})
        return out

    def benchmark(self) -> tuple[list[str], dict[str, str]] | None:
        return (list(MPI4PY_RING), {}) if "mpi4py" in self.opts["packages"] else None

    def written_packages(self) -> list[tuple[str, str, int]]:
        return [(f"python3-{p}", "packages", i) for i, p in enumerate(self.opts["packages"])]

    def labels(self) -> dict[str, str]:
        return {"packages": ",".join(self.opts["packages"]), "pip": ",".join(self.opts["pip"])}

    def checks(self) -> list:
        return [checks.run("python.version", f"python3 is Python {self.version}", "python3 --version",
                           expect=rf"Python {self.version}")] + \
            [checks.python_import(f"python.{p}", p) for p in self.opts["packages"]]


def check_requirements(component: Component, key: str) -> None:
    """Each item must parse as one PEP 508 requirement (pip gets it as one quoted argument)."""
    from packaging.requirements import InvalidRequirement, Requirement

    for i, item in enumerate(component.opts[key]):
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            component.error(key, f"item {i + 1} {item!r} is not a pip requirement: {str(exc).splitlines()[0]}",
                            'write one requirement per item, e.g. "numpy==2.1.3" or "torchvision>=0.20"')
