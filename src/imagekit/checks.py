"""Checks as data: what a component (or a stack file) says must hold in its image.

A check reads like a sentence and needs no Python to write, in the spirit of
container-structure-test; ``imagekit.check`` runs them with pytest-testinfra.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("run", "file", "absent", "library", "python_import")
NEEDS = ("gpu", "fabric")


@dataclass(frozen=True)
class Check:
    id: str                      # "openmpi.version": component (or "stack") + short name
    describe: str                # the sentence a report shows
    run: str | None = None       # shell command that must exit 0 ...
    expect: str | None = None    # ... and whose output must match this regex
    file: str | None = None      # path that must exist (any type; symlinks followed)
    absent: str | None = None    # shell glob(s) that must match nothing
    library: str | None = None   # soname that the dynamic loader cache must resolve
    python_import: str | None = None  # module that ``python3 -c 'import X'`` must import
    needs: str | None = None     # "gpu" | "fabric": reported as not run where absent
    env: dict = field(default_factory=dict)  # extra environment for ``run``
    target: str | None = None    # "devel": only the devel image has what it checks (nvcc, headers)

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    def as_dict(self) -> dict:
        out = {"id": self.id, "describe": self.describe, "kind": self.kind,
               self.kind: getattr(self, self.kind)}
        if self.expect:
            out["expect"] = self.expect
        if self.needs:
            out["needs"] = self.needs
        if self.target:
            out["target"] = self.target
        return out


def run(id: str, describe: str, command: str, expect: str | None = None, **kw) -> Check:
    return Check(id=id, describe=describe, run=command, expect=expect, **kw)


def library(id: str, soname: str, **kw) -> Check:
    return Check(id=id, describe=f"{soname} resolves through the dynamic loader cache", library=soname, **kw)


def file(id: str, path: str, **kw) -> Check:
    return Check(id=id, describe=f"{path} exists", file=path, **kw)


def absent(id: str, pattern: str, describe: str, **kw) -> Check:
    return Check(id=id, describe=describe, absent=pattern, **kw)


def python_import(id: str, module: str, **kw) -> Check:
    return Check(id=id, describe=f"python3 imports {module}", python_import=module, **kw)


# Driver libraries the GPU runtime injects (NVIDIA container toolkit, Enroot's nvidia hook,
# Apptainer --nv): an image must not carry them, so their absence is expected.
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")


def ldd_closure(id: str, prefixes: list[str], **kw) -> Check:
    """Every ELF file under ``prefixes`` finds all its libraries, driver libraries excepted.

    Counting the files checked makes an empty or missing prefix fail instead of passing vacuously.
    """
    allowed = "|".join(lib.replace(".", "[.]") for lib in DRIVER_LIBS)
    script = (
        f"find {' '.join(prefixes)} -type f 2>/dev/null | {{ n=0; bad=0; "
        "while IFS= read -r f; do "
        '[ "$(od -An -N4 -tx1 "$f" | tr -d \' \')" = 7f454c46 ] || continue; n=$((n+1)); '
        f'm=$(ldd "$f" 2>/dev/null | grep "=> not found" | grep -v -E "^[[:space:]]*({allowed}) "); '
        '[ -z "$m" ] || { bad=1; echo "$f:"; echo "$m"; }; done; '
        'echo "checked $n ELF files"; [ "$bad" -eq 0 ]; }')
    return run(id, f"every ELF file under {', '.join(prefixes)} resolves its libraries "
                   f"({' and '.join(DRIVER_LIBS)} come from the host's driver)",
               script, expect=r"checked [1-9]\d* ELF files", **kw)
