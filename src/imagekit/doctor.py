"""``imagekit doctor``: a site's whole set-up for imagekit images on one screen.

What a site configures in several places, each checked where it lives: Pyxis's line in
``plugstack.conf`` (and the files it includes), the importer wrapper that line names (the program it runs
and what it exports: the shared store, the signature policy), the policy itself and its keys (read in
full, as the importer reads them), the shared export store, and the runtimes and tools with their
versions. Nothing here changes anything. A finding is ``ok``, ``warn`` (works, but not as a site
likely means it), ``problem`` (images are served unchecked, or a job fails) or ``absent`` (not set up
here, which may be right for this host).
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import re
import shlex
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from imagekit.attest import POLICY_ENV
from imagekit.attest import policy as policy_mod
from imagekit.export import pyxis_unsigned
from imagekit.export.store import Store
from imagekit.util import own_python, version_info
from imagekit.util.errors import ImagekitError
from imagekit.util.sizes import human

SLURM_CONF = Path("/etc/slurm/slurm.conf")
PLUGSTACK = Path("/etc/slurm/plugstack.conf")
WRAPPER_MAX = 64 << 10        # a wrapper is a few lines; a larger file is not read as one
WRAPPER_VARS = (POLICY_ENV, "IMAGEKIT_SHARED_STORE", "IMAGEKIT_TRUSTED_ARTIFACTS", "IMAGEKIT_STORE",
                "IMAGEKIT_IMPORTER_PRESET")
EXPIRES_SOON = dt.timedelta(days=30)
# name -> the command that prints its version (first line kept).
TOOLS = {"docker": ["docker", "version", "--format", "{{.Client.Version}} (engine {{.Server.Version}})"],
         "podman": ["podman", "--version"], "enroot": ["enroot", "version"], "apptainer": ["apptainer", "--version"],
         "singularity": ["singularity", "--version"], "slurm": ["srun", "--version"],
         "squashfs-tools": ["mksquashfs", "-version"], "tar2sqfs": ["tar2sqfs", "--version"]}


@dataclass
class Finding:
    what: str
    status: str          # ok | warn | problem | absent
    detail: str


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    def add(self, what: str, status: str, detail: str) -> None:
        self.findings.append(Finding(what, status, detail))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "problem"]

    def as_list(self) -> list[dict]:
        return [asdict(f) for f in self.findings]


@dataclass(frozen=True)
class DoctorRequest:
    plugstack: Path | None = None          # default: slurm.conf's PlugStackConfig, else PLUGSTACK
    wrapper: Path | None = None            # default: the importer= of Pyxis's line
    site_policy: Path | None = None        # default: the usual places (pyxis_unsigned.SITE_POLICY_FILES)


def examine(request: DoctorRequest = DoctorRequest()) -> Report:
    report = Report()
    _imagekit(report)
    wrapper = request.wrapper or _pyxis(report, request.plugstack or _plugstack())
    exported = _wrapper(report, wrapper) if wrapper is not None else {}
    _policy(report, exported, request.site_policy or pyxis_unsigned.site_policy())
    _store(report, exported.get("IMAGEKIT_SHARED_STORE"))
    for name, argv in TOOLS.items():
        _tool(report, name, argv)
    return report


def _imagekit(report: Report) -> None:
    python = Path(own_python.interpreter())
    closed = [str(p) for p in [*reversed(python.parents), python]
              if p.exists() and not os.stat(p).st_mode & stat.S_IXOTH]
    report.add("imagekit", "warn" if closed else "ok",
               f"{version_info.full_version()} ({python}" + (f"; not runnable by other users: {closed[0]} has no o+x, so Pyxis "
                                            "jobs of other users cannot run this interpreter)" if closed else ")"))


def _plugstack() -> Path:
    conf = Path(os.environ.get("SLURM_CONF") or SLURM_CONF)
    try:
        for line in conf.read_text().splitlines():
            m = re.match(r"\s*PlugStackConfig\s*=\s*(\S+)", line, re.I)
            if m:
                return Path(m.group(1))
    except OSError:
        pass
    return PLUGSTACK


def _plugstack_lines(path: Path, seen: set[Path] | None = None) -> list[tuple[Path, int, str]]:
    """Every line of ``path`` and of the files its ``include`` lines name, in order."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    out = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words[:1] == ["include"] and len(words) == 2:
            for included in sorted(glob.glob(words[1])):
                out += _plugstack_lines(Path(included), seen)
        elif words:
            out.append((path, n, line.strip()))
    return out


def _pyxis(report: Report, plugstack: Path) -> Path | None:
    lines = [(f, n, text) for f, n, text in _plugstack_lines(plugstack)
             if len(text.split()) >= 2 and "pyxis" in Path(text.split()[1]).name]
    if not lines:
        report.add("pyxis", "absent", f"no pyxis.so line in {plugstack} or the files it includes")
        return None
    where, n, text = lines[0]
    args = dict(a.split("=", 1) for a in text.split()[2:] if "=" in a)
    if "importer" not in args:
        report.add("pyxis", "warn", f"{where}:{n}: Pyxis imports with `enroot import`: imagekit's importer is not "
                                    "named (add importer=WRAPPER; docs/registry.md)")
        return None
    report.add("pyxis", "ok", f"{where}:{n}: {text}")
    return Path(args["importer"])


def _wrapper(report: Report, wrapper: Path) -> dict[str, str]:
    try:
        st = wrapper.stat()
        text = wrapper.read_text(errors="replace") if st.st_size <= WRAPPER_MAX else ""
    except OSError as exc:
        report.add("importer", "problem", f"{wrapper}: {exc.strerror}: every `srun --container-image` fails")
        return {}
    exported = {}
    for line in text.splitlines():
        m = re.match(r"\s*export\s+([A-Z_][A-Z0-9_]*)=(.*)$", line)
        if m and m.group(1) in WRAPPER_VARS:
            value = shlex.split(m.group(2), comments=True)
            exported[m.group(1)] = value[0] if value else ""
    program = next((w for line in text.splitlines() if line.strip().startswith("exec ")
                    for w in shlex.split(line, comments=True)[1:] if "imagekit-pyxis-importer" in w
                    or w.endswith(("pyxis_importer", "pyxis_signed"))), "")
    signed = program.endswith(("-signed", "pyxis_signed"))
    settings = "; ".join(f"{k}={v}" for k, v in exported.items()) or "no IMAGEKIT_ settings"
    if not st.st_mode & stat.S_IXOTH:
        report.add("importer", "problem", f"{wrapper}: not executable by job users (mode {st.st_mode & 0o7777:o})")
    elif not program:
        report.add("importer", "warn", f"{wrapper}: runs no imagekit-pyxis-importer that imagekit can see; {settings}")
    elif signed and not exported.get(POLICY_ENV):
        report.add("importer", "problem", f"{wrapper}: runs {Path(program).name} without {POLICY_ENV}: it refuses "
                                          "every image")
    else:
        report.add("importer", "ok", f"{wrapper}: runs {Path(program).name}; {settings}")
    return exported


def _policy(report: Report, exported: dict[str, str], site_policy: Path | None) -> None:
    named = exported.get(POLICY_ENV) or os.environ.get(POLICY_ENV)
    if not named:
        if site_policy is not None:
            report.add("policy", "problem", f"none in force, yet the site has {site_policy}: unsigned images are "
                                            f"served (export {POLICY_ENV}={site_policy} in the importer's wrapper)")
        else:
            report.add("policy", "absent", "no signature policy: every image is served unchecked (docs/signing.md)")
        return
    try:
        loaded = policy_mod.load(named)
    except (ImagekitError, OSError) as exc:
        report.add("policy", "problem", f"{named}: {getattr(exc, 'message', exc)}: the importer refuses every image")
        return
    unsigned = [r.match for r in loaded.rules if r.unsigned]
    report.add("policy", "ok", f"{named}: {len(loaded.rules)} rules" + (f"; unsigned accepted for "
                                                                        f"{', '.join(unsigned)}" if unsigned else ""))
    _keys(report, loaded)


def _keys(report: Report, loaded: policy_mod.Policy) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    seen: dict[str, tuple] = {}
    for rule in loaded.rules:
        if rule.trust is not None:
            for key in rule.trust.keys:
                seen.setdefault(key.name, (key, key.key.keyid in rule.trust.revoked or key.name in rule.trust.revoked))
    for name, (key, revoked) in seen.items():
        if revoked:
            report.add(f"key {name}", "warn", f"{key.key.keyid}: revoked, yet a rule names it")
        elif key.not_after is not None and key.not_after < now:
            report.add(f"key {name}", "problem", f"{key.key.keyid}: expired {key.not_after.date()}")
        elif key.not_after is not None and key.not_after - now < EXPIRES_SOON:
            report.add(f"key {name}", "warn", f"{key.key.keyid}: expires {key.not_after.date()}")
        else:
            report.add(f"key {name}", "ok", f"{key.key.keyid}" + (f", until {key.not_after.date()}"
                                                                  if key.not_after else ""))


def _store(report: Report, shared: str | None) -> None:
    if not shared:
        report.add("store", "absent", "no shared export store (IMAGEKIT_SHARED_STORE): each user converts into "
                                      "their own")
        return
    try:
        store = Store.open(shared, create=False)
        entries = store.entries()
    except ImagekitError as exc:
        report.add("store", "problem", f"{shared}: {exc.message}")
        return
    st = os.stat(store.root)
    report.add("store", "ok", f"{store.root}: {len(entries)} entries, {human(sum(e.bytes for e in entries))}, "
                              f"mode {st.st_mode & 0o7777:o}, group {st.st_gid}")


def _tool(report: Report, name: str, argv: list[str]) -> None:
    if shutil.which(argv[0]) is None:
        report.add(name, "absent", f"no {argv[0]} on PATH")
        return
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.add(name, "warn", f"{argv[0]} did not answer: {exc}")
        return
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    first = lines[0] if lines else ""
    if proc.returncode != 0:
        first = f"`{' '.join(argv[:2])}` exited {proc.returncode}: {first}"
    report.add(name, "ok" if proc.returncode == 0 else "warn", first[:140])
