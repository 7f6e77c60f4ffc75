"""Checks as data: what a component (or a stack file) says must hold in its image.

A check reads like a sentence and needs no Python to write, in the spirit of
container-structure-test: one class per kind (:class:`Run`, :class:`File`,
:class:`Absent`, :class:`Library`, :class:`PythonImport`, :class:`LddClosure`),
each owning its validation, its sentence and how it verifies an image
(``verify(host)``, run by :mod:`imagekit.checks.runner` through pytest-testinfra).

Checks travel inside images as JSON (label ``io.imagekit.checks``), so a check
is also read back from whoever built the image: :func:`from_dict` refuses an
unknown kind or a value its kind does not accept with a :class:`InvalidCheck`
naming the check. A value reaches the container's shell only as a quoted
argument (``host.run("cmd %s", value)``), except a run check's command, which
is code by design, and :class:`Absent`'s globs, which must stay bare to glob
and so are held to a few safe characters.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, NoReturn

from imagekit.util import login_env as login_env_mod
from imagekit.util import quoting
from imagekit.util.errors import UsageError

if TYPE_CHECKING:
    from testinfra.host import Host

NEEDS = ("gpu", "fabric")
# Driver libraries the GPU runtime injects (NVIDIA container toolkit, Enroot's nvidia hook,
# Apptainer --nv): an image must not carry them, so their absence is expected.
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")

# Absent's globs reach the shell bare (quoted, they would not glob): only characters that are
# literal or a glob there, so a value can add no command, expansion or redirection.
_GLOB = re.compile(r"/[A-Za-z0-9_./*?\[\]+@%:,=-]*")
_SONAME = re.compile(r"[A-Za-z0-9_.+-]+")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_PREFIX = re.compile(r"/[A-Za-z0-9_./+@:,=-]*")
_UID = re.compile(r"[0-9]+")

_KIND_CLASSES: dict[str, type[Check]] = {}


class InvalidCheck(UsageError):
    """A check whose kind is unknown or whose value its kind refuses (exit code 2)."""

    def __init__(self, check_id: Any, kind: Any, problem: str, hint: str | None = None) -> None:
        who = "a check" if check_id in (None, "") else f"check {_name(check_id)}"
        super().__init__(f"{who}{'' if kind is None else f' (kind {_name(kind)})'}: {problem}", hint)
        self.check_id, self.kind, self.problem = check_id, kind, problem


def _name(value: Any) -> str:
    # An id or kind read from a label is the image builder's text: plain names as they are, the
    # rest as a short literal, never raw escape sequences or newlines on the user's terminal.
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.@:+-]+", value):
        return value
    return quoting.shown(value) if isinstance(value, str) else repr(value)


def _fail_unless(ok: bool, message: str) -> None:
    # An AssertionError, as a failed `assert` would raise, but one that `python -O` cannot strip.
    if not ok:
        raise AssertionError(message)


def _show(cmd: Any) -> str:
    out = (cmd.stdout + cmd.stderr).strip().splitlines()
    return "\n".join(out[-25:]) or "(no output)"


def _by_kind(kind: str) -> property:
    return property(lambda self: self.value if self.kind == kind else None,
                    doc=f"this check's value if it is a {kind} check, else None")


@dataclass(frozen=True)
class Check:
    """What every kind shares. Subclasses register their kind: ``class Run(Check, kind="run")``.

    Construct with keywords: every field has a default only so that subclasses may add fields
    (dataclasses before Python 3.10 have no keyword-only fields); validation refuses what is missing.
    """

    id: str = ""                   # "openmpi.version": component (or "stack") + short name
    describe: str = ""             # the sentence a report shows; empty: the kind's own sentence
    needs: str | None = None       # "gpu" | "fabric": reported as not run where absent
    target: str | None = None      # "devel": only the devel image has what it checks (nvcc, headers)

    kind: ClassVar[str] = ""
    # Keys of the label's JSON besides id, describe, kind, the kind's value, needs and target.
    options: ClassVar[tuple[str, ...]] = ()
    # The field that holds the kind's value, for kinds whose value is one string field.
    value_field: ClassVar[str] = ""

    def __init_subclass__(cls, kind: str = "", **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if kind:
            cls.kind = kind
            _KIND_CLASSES[kind] = cls

    def __post_init__(self) -> None:
        if not self.kind:
            raise TypeError("Check is the base class: use one of its kinds (Run, File, ...)")
        if not isinstance(self.id, str) or not self.id:
            self._invalid("has no id (a non-empty string)")
        self._text("id", self.id)
        if not isinstance(self.describe, str):
            self._invalid(f"describe must be a string, not {type(self.describe).__name__}")
        self._text("describe", self.describe, empty=True)
        if self.needs is not None and self.needs not in NEEDS:
            self._invalid(f"needs {quoting.shown(str(self.needs))} is not one of {', '.join(NEEDS)}")
        if self.target is not None and not isinstance(self.target, str):
            self._invalid(f"target must be a string, not {type(self.target).__name__}")
        self.validate()
        if not self.describe:
            object.__setattr__(self, "describe", self.sentence())

    # -- what each kind says ------------------------------------------------------------------

    def validate(self) -> None:
        """Refuse a value this kind cannot check safely (raise through :meth:`_invalid`)."""

    def sentence(self) -> str:
        """The describe default."""
        return f"{self.kind}: {self.value}"

    @property
    def value(self) -> Any:
        """The kind's value as the label's JSON carries it, under the key named after the kind."""
        return getattr(self, self.value_field)

    @classmethod
    def fields_from(cls, value: Any) -> dict[str, Any]:
        """The constructor's fields for the label's value (the inverse of :attr:`value`)."""
        return {cls.value_field: value}

    def verify(self, host: Host) -> None:
        """Raise AssertionError, saying what is wrong, unless the image in ``host`` passes."""
        raise NotImplementedError

    # -- kind-independent ---------------------------------------------------------------------

    def as_dict(self) -> dict:
        out = {"id": self.id, "describe": self.describe, "kind": self.kind, self.kind: self.value}
        for key in self.options:
            default = self.__dataclass_fields__[key].default
            if getattr(self, key) != default:
                out[key] = getattr(self, key)
        if self.needs:
            out["needs"] = self.needs
        if self.target:
            out["target"] = self.target
        return out

    @classmethod
    def from_dict(cls, spec: Mapping) -> Check:
        """A check from the label's JSON (what :meth:`as_dict` writes), dispatched on ``kind``."""
        if not isinstance(spec, Mapping):
            raise InvalidCheck(None, None, f"is {type(spec).__name__}, not a mapping",
                               "the label io.imagekit.checks is a list of objects, one a check")
        cid, kind = spec.get("id"), spec.get("kind")
        kind_class = _KIND_CLASSES.get(kind) if isinstance(kind, str) else None
        if kind_class is None:
            raise InvalidCheck(cid, kind, "has no kind" if kind is None else "unknown kind",
                               f"known kinds: {', '.join(KINDS)}; an image built by a newer imagekit "
                               "needs that imagekit to check it")
        if kind not in spec:
            raise InvalidCheck(cid, kind, f"has no {kind!r} value")
        known = {"id", "describe", "kind", kind, "needs", "target", *kind_class.options}
        unknown = sorted(map(str, set(spec) - known))
        if unknown:
            raise InvalidCheck(cid, kind, f"unknown keys {', '.join(map(repr, unknown))}",
                               "a key this imagekit does not know would be a condition it does not check")
        common = {k: spec[k] for k in ("id", "describe", "needs", "target") if k in spec}
        options = {k: spec[k] for k in kind_class.options if k in spec}
        return kind_class(**common, **options, **kind_class.fields_from(spec[kind]))

    # The flat Check's reading of one kind's value by that kind's name (``c.run``,
    # ``getattr(c, c.kind)``), which callers and tests still use: None for the other kinds.
    run = _by_kind("run")
    file = _by_kind("file")
    absent = _by_kind("absent")
    library = _by_kind("library")
    python_import = _by_kind("python_import")
    ldd_closure = _by_kind("ldd_closure")
    login_env = _by_kind("login_env")
    expect = None  # only Run has one

    # -- helpers ------------------------------------------------------------------------------

    def _invalid(self, problem: str, hint: str | None = None) -> NoReturn:
        raise InvalidCheck(self.id, self.kind, problem, hint)

    def _text(self, name: str, value: Any, *, empty: bool = False) -> None:
        if not isinstance(value, str):
            self._invalid(f"{name} must be a string, not {type(value).__name__}")
        if not value and not empty:
            self._invalid(f"{name} is empty")
        try:
            quoting.valid_text(value, "check", name)
        except quoting.UnsafeValue as exc:
            self._invalid(exc.message.removeprefix("check: "), exc.hint)
        try:
            value.encode("utf-8")  # strictly: testinfra encodes commands so, non-UTF-8 bytes fail there
        except UnicodeEncodeError:
            self._invalid(f"{name} {quoting.shown(value)} is not UTF-8 text")

    def _pattern(self, name: str, value: Any, pattern: re.Pattern, help: str) -> None:
        self._text(name, value)
        if not pattern.fullmatch(value):
            self._invalid(f"{name} {quoting.shown(value)} is not {help}")

    def _regex(self, name: str, value: Any) -> None:
        if value is None:
            return
        self._text(name, value)
        try:
            re.compile(value)
        except re.error as exc:
            self._invalid(f"{name} {quoting.shown(value)} is not a valid regex: {exc}")

    def _words(self, name: str, words: Any, pattern: re.Pattern, help: str) -> None:
        if not isinstance(words, tuple) or not words:
            self._invalid(f"{name} must be one or more words")
        for i, word in enumerate(words):
            self._pattern(f"{name}[{i + 1}]", word, pattern, help)


@dataclass(frozen=True)
class Run(Check, kind="run"):
    """A shell command that must exit ``exit_code`` and print a match of ``expect`` and none of
    ``excluded``. The command is code by design: it runs in a container of the image under test."""

    command: str = ""
    value_field: ClassVar[str] = "command"
    expect: str | None = None      # regex the output (stdout + stderr) must match
    exit_code: int = 0
    excluded: str | None = None    # regex the output must not match
    options: ClassVar[tuple[str, ...]] = ("expect", "exit_code", "excluded")

    def __post_init__(self) -> None:
        # An empty regex matches anything: the same as none, so it is held (and written) as none.
        for name in ("expect", "excluded"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)
        super().__post_init__()

    def validate(self) -> None:
        self._text("command", self.command)
        self._regex("expect", self.expect)
        self._regex("excluded", self.excluded)
        if isinstance(self.exit_code, bool) or not isinstance(self.exit_code, int) or not 0 <= self.exit_code <= 255:
            self._invalid(f"exit_code {self.exit_code!r} is not an exit status (0 to 255)")

    def verify(self, host: Host) -> None:
        cmd = host.run(self.command)
        if self.exit_code == 0:
            _fail_unless(cmd.rc == 0, f"`{self.command}` exited {cmd.rc}:\n{_show(cmd)}")
        else:
            _fail_unless(cmd.rc == self.exit_code,
                         f"`{self.command}` exited {cmd.rc}, not {self.exit_code}:\n{_show(cmd)}")
        output = cmd.stdout + cmd.stderr
        if self.expect:
            _fail_unless(bool(re.search(self.expect, output)),
                         f"`{self.command}` output does not match /{self.expect}/:\n{_show(cmd)}")
        if self.excluded:
            _fail_unless(not re.search(self.excluded, output),
                         f"`{self.command}` output matches /{self.excluded}/, which it must not:\n{_show(cmd)}")


@dataclass(frozen=True)
class File(Check, kind="file"):
    """A path that must exist (any type; symlinks followed). The path is data: testinfra quotes it."""

    path: str = ""
    value_field: ClassVar[str] = "path"

    def validate(self) -> None:
        self._text("path", self.path)

    def sentence(self) -> str:
        return f"{self.path} exists"

    def verify(self, host: Host) -> None:
        _fail_unless(host.file(self.path).exists, f"{self.path} does not exist")


@dataclass(frozen=True)
class Absent(Check, kind="absent"):
    """Globs that must match nothing: no secret or stray file baked into a layer."""

    patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", _as_tuple(self.patterns))
        super().__post_init__()

    def validate(self) -> None:
        self._words("patterns", self.patterns, _GLOB,
                    "an absolute path with * ? [] wildcards and no other shell characters")

    @property
    def value(self) -> str:
        return " ".join(self.patterns)

    @classmethod
    def fields_from(cls, value: Any) -> dict[str, Any]:
        return {"patterns": value.split(" ") if isinstance(value, str) else value}

    def verify(self, host: Host) -> None:
        # Bare words, validated above: quoted, a glob would only match a file named "*".
        cmd = host.run(f'for f in {" ".join(self.patterns)}; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done; true')
        _fail_unless(not cmd.stdout.strip(), f"found files that must not be in the image:\n{cmd.stdout.strip()}")


@dataclass(frozen=True)
class Library(Check, kind="library"):
    """A soname the dynamic loader cache must resolve, to a file that exists."""

    soname: str = ""
    value_field: ClassVar[str] = "soname"

    def validate(self) -> None:
        self._pattern("soname", self.soname, _SONAME, "a soname like libnccl.so.2")

    def sentence(self) -> str:
        return f"{self.soname} resolves through the dynamic loader cache"

    def verify(self, host: Host) -> None:
        cmd = host.run("ldconfig -p")
        hits = [l for l in cmd.stdout.splitlines() if l.strip().split(" ", 1)[0] == self.soname]
        _fail_unless(bool(hits), f"{self.soname} is not in the dynamic loader cache (ldconfig -p)")
        path = hits[0].rsplit("=> ", 1)[-1].strip()
        _fail_unless(host.file(path).exists, f"{self.soname} points to {path}, which does not exist")


@dataclass(frozen=True)
class PythonImport(Check, kind="python_import"):
    """A module ``python3`` must import."""

    module: str = ""
    value_field: ClassVar[str] = "module"

    def validate(self) -> None:
        self._pattern("module", self.module, _MODULE, "a dotted module name like torch.distributed")

    def sentence(self) -> str:
        return f"python3 imports {self.module}"

    def verify(self, host: Host) -> None:
        # The name is an argument, not source code: validated above and still only ever data.
        cmd = host.run("python3 -c %s %s", "import importlib, sys; importlib.import_module(sys.argv[1])",
                       self.module)
        _fail_unless(cmd.rc == 0, f"python3 cannot import {self.module}:\n{_show(cmd)}")


# Each ELF file (by its magic number) under the prefixes, through `ldd -r`: a missing library, or a
# symbol no loaded library defines (a library built against a newer sibling than the image carries),
# makes it fail. Counting the files makes an empty or missing prefix fail instead of passing vacuously.
# A plugin (Open MPI's mca_*.so, PMIx's and UCX's modules) takes some symbols from the library that
# dlopens it, which it does not name itself: a file whose only problem is undefined symbols is tried
# again with every library the prefix's own files load preloaded, as its host process would have them
# (those that resolve completely: a library that leaves any symbol to its host, a plugin or one
# that takes the Python C API, would stop `ldd`'s own shell once preloaded).
# What the host provides is let through: the driver libraries, the driver's symbols (cu*, nvml*), and
# the Python C API (extension modules and libraries such as libtorch_python take it from the
# interpreter that loads them), and the perftest driver's symbols in UCX's perftest modules
# (lib/ucx/libucx_perftest_*.so, dlopened by the ucx_perftest executable, which defines them).
# %s: the prefixes, then the driver libraries' regex and the host symbols' regex (testinfra quotes them).
_LDD_SCRIPT = (
    " -type f 2>/dev/null | { n=0; bad=0; t=$(mktemp -d); "
    "while IFS= read -r f; do "
    '[ "$(od -An -N4 -tx1 "$f" | tr -d \' \')" = 7f454c46 ] || continue; n=$((n+1)); '
    'o=$(ldd -r "$f" 2>&1); '
    'printf "%%s\\n" "$o" | grep -q "=> not found" || '
    '{ printf "%%s\\n" "$o" | awk \'$2 == "=>" && $3 ~ /^\\// {print $3}\' >> "$t/libs"; '
    'case "$f" in */lib*.so*) echo "$f" >> "$t/libs";; esac; }; '
    'printf "%%s\\n" "$o" | grep -q "undefined symbol" && readlink -f "$f" >> "$t/partial"; '
    'm=$(printf "%%s\\n" "$o" | grep -E "=> not found|undefined symbol" | grep -v -E "$1" | grep -v -E "$2"); '
    '[ -z "$m" ] && continue; '
    'if printf "%%s\\n" "$m" | grep -q "not found"; then bad=1; echo "$f:"; echo "$m"; '
    'else echo "$f" >> "$t/retry"; fi; done; '
    'if [ -s "$t/retry" ]; then touch "$t/partial"; '
    'pre=$(grep -v -E "/ld-linux|/libc[.]so" "$t/libs" | sort -u | while IFS= read -r l; do '
    'grep -q -x -F "$(readlink -f "$l")" "$t/partial" || printf "%%s " "$l"; done); '
    'while IFS= read -r f; do '
    'm=$(LD_PRELOAD="$pre" ldd -r "$f" 2>&1 | grep -E "undefined symbol" | grep -v -E "$2"); '
    '[ -z "$m" ] || { bad=1; echo "$f:"; echo "$m"; }; done < "$t/retry"; fi; rm -rf "$t"; '
    'echo "checked $n ELF files"; [ "$bad" -eq 0 ]; }')
_HOST_SYMBOLS = (r"undefined symbol: ((cu[A-Z][A-Za-z0-9_]*|nvml[A-Z][A-Za-z0-9_]*|_?Py[A-Za-z0-9_]+)[[:space:]]"
                 r"|ucx_perf_[A-Za-z0-9_]+[[:space:]]+\(.*/libucx_perftest_[^/]*\))")
_LDD_COUNTED = re.compile(r"checked [1-9]\d* ELF files")


@dataclass(frozen=True)
class LddClosure(Check, kind="ldd_closure"):
    """Every ELF file under ``prefixes`` finds all its libraries, driver libraries excepted."""

    prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefixes", _as_tuple(self.prefixes))
        super().__post_init__()

    def validate(self) -> None:
        self._words("prefixes", self.prefixes, _PREFIX, "an absolute path without shell characters")

    def sentence(self) -> str:
        return (f"every ELF file under {', '.join(self.prefixes)} resolves its libraries "
                f"({' and '.join(DRIVER_LIBS)} come from the host's driver)")

    @property
    def value(self) -> str:
        # Words like Absent's, so that every kind's value in the label is one string.
        return " ".join(self.prefixes)

    @classmethod
    def fields_from(cls, value: Any) -> dict[str, Any]:
        return {"prefixes": value.split(" ") if isinstance(value, str) else value}

    def command(self) -> tuple[str, list[str]]:
        """The script and its arguments, for ``host.run(script, *arguments)``."""
        allowed = "|".join(lib.replace(".", "[.]") for lib in DRIVER_LIBS)
        # The two regexes reach the pipeline as the positional parameters of `set --`.
        script = "set -- %s %s; find " + " ".join("%s" for _ in self.prefixes) + _LDD_SCRIPT
        return script, [f"^[[:space:]]*({allowed}) ", _HOST_SYMBOLS, *self.prefixes]

    def verify(self, host: Host) -> None:
        script, arguments = self.command()
        cmd = host.run(script, *arguments)
        under = ", ".join(self.prefixes)
        # A missing library makes every file above it fail too: name the missing ones first, so that
        # the cause is not lost below the symbols that follow from it.
        missing = sorted({line.strip() for line in (cmd.stdout + cmd.stderr).splitlines() if "=> not found" in line})
        first = "".join(f"{m}\n" for m in missing)
        _fail_unless(cmd.rc == 0, f"ELF files under {under} miss libraries:\n{first}{_show(cmd)}")
        _fail_unless(bool(_LDD_COUNTED.search(cmd.stdout + cmd.stderr)),
                     f"no ELF file under {under}, so nothing was checked:\n{_show(cmd)}")


# Set by the runtime or by the shell itself, whatever the image declares.
_LOGIN_OWN = ("HOSTNAME", "HOME", "PWD", "OLDPWD", "SHLVL", "_")
_LOGIN_SCRIPT = r"""
env_file=/etc/environment
saved=
if [ -e "$env_file" ]; then saved=$(mktemp) && cp -p "$env_file" "$saved"; fi
restore() { if [ -n "$saved" ]; then cp -p "$saved" "$env_file"; rm -f "$saved"; else rm -f "$env_file"; fi; }
trap restore EXIT
# What Enroot's import writes: the image's Env, one NAME=VALUE a line.
printf '%s\n' "$@" > "$env_file"
shells=/bin/sh
if [ -x /bin/bash ]; then shells="$shells /bin/bash"; fi
# The reference: the image's own profile.d scripts (not imagekit's, at its place now or before) and the
# user's profile on the declared values, with no /etc/profile body before them (a base resetting nothing).
# shellcheck disable=SC2016
reference='for i in /etc/profile.d/*.sh; do case $i in *-imagekit-environment.sh) continue ;; esac
  if [ -r "$i" ]; then . "$i"; fi; done; unset i
if [ -n "${BASH_VERSION-}" ]; then
  for p in "$HOME/.bash_profile" "$HOME/.bash_login" "$HOME/.profile"; do if [ -r "$p" ]; then . "$p"; break; fi; done
elif [ -r "$HOME/.profile" ]; then . "$HOME/.profile"; fi
env -0 | base64 -w0'
for uid in UIDS; do
  for shell in $shells; do
    # As enroot-switchroot starts it: only the environment file's variables, then a login shell.
    if [ "$uid" = 0 ]; then
      out=$(env -i "$@" HOME=/root "$shell" -l -c 'env -0 | base64 -w0' </dev/null)
      ref=$(env -i "$@" HOME=/root "$shell" -c "$reference" </dev/null 2>/dev/null)
    elif command -v setpriv >/dev/null 2>&1; then
      out=$(env -i "$@" HOME=/ setpriv --reuid="$uid" --regid="$uid" --clear-groups \
            "$shell" -l -c 'env -0 | base64 -w0' </dev/null)
      ref=$(env -i "$@" HOME=/ setpriv --reuid="$uid" --regid="$uid" --clear-groups \
            "$shell" -c "$reference" </dev/null 2>/dev/null)
    else
      out=NOSETPRIV ref=NOSETPRIV
    fi
    echo "$uid $shell ${out:--} ${ref:--}"
  done
done
"""


@dataclass(frozen=True)
class LoginEnv(Check, kind="login_env"):
    """The image's declared environment survives a login shell, for root and for each of ``uids``.

    Enroot and Pyxis start every command through a login shell, which runs the base's
    /etc/profile (Debian's resets PATH); ``docker run`` starts none, so nothing else would show
    it. The check writes /etc/environment as Enroot's import does, starts ``sh -l`` (and
    ``bash -l``) with that environment alone, as ``enroot-switchroot`` does, and compares
    every declared variable with what the image's own /etc/profile.d scripts and the user's
    profile make of it with no /etc/profile body before them: a module system or tool chain
    that adds to PATH passes, a base's reset fails (:mod:`imagekit.util.login_env`). Names a shell
    refuses from its environment (``login_env.NEVER_RESTORED``) are not compared.
    /etc/environment is put back afterwards."""

    uids: tuple[str, ...] = ("0",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "uids", _as_tuple(self.uids))
        super().__post_init__()

    def validate(self) -> None:
        self._words("uids", self.uids, _UID, "a numeric user id")

    def sentence(self) -> str:
        return (f"a login shell (Enroot, Pyxis) keeps the image's environment, as uid {', '.join(self.uids)}")

    @property
    def value(self) -> str:
        return " ".join(self.uids)

    @classmethod
    def fields_from(cls, value: Any) -> dict[str, Any]:
        return {"uids": value.split(" ") if isinstance(value, str) else value}

    def verify(self, host: Host) -> None:
        raw = host.run("base64 -w0 /proc/1/environ")
        _fail_unless(raw.rc == 0, f"cannot read the container's environment:\n{_show(raw)}")
        declared = {}
        for entry in base64.b64decode(raw.stdout.strip()).decode(errors="replace").split("\0"):
            name, sep, value = entry.partition("=")
            # A newline cannot be carried by Enroot's /etc/environment (imagekit export refuses it).
            if (sep and quoting.ENV_NAME.fullmatch(name) and "\n" not in value and name not in _LOGIN_OWN
                    and not login_env_mod.never_restored(name)):
                declared[name] = value
        entries = [f"{k}={v}" for k, v in declared.items()]
        script = _LOGIN_SCRIPT.replace("UIDS", " ".join(self.uids))
        cmd = host.run("sh -c %s sh" + " %s" * len(entries), script, *entries)
        _fail_unless(cmd.rc == 0, f"could not start login shells:\n{_show(cmd)}")
        lost = []
        for line in cmd.stdout.splitlines():
            uid, shell, out, ref = (line.split(" ", 3) + ["", "", ""])[:4]
            if out == "NOSETPRIV":
                continue  # no setpriv in the image: only root's shells are checked
            seen, made = _env_of(out), _env_of(ref)
            who = f"`{shell.rsplit('/', 1)[-1]} -l` as uid {uid}"
            for name, value in declared.items():
                want = made.get(name, value)
                if seen.get(name) != want:
                    got = "unsets it" if name not in seen else f"sees {quoting.shown(seen[name])}"
                    how = "" if want == value else f" (its profile.d scripts make it {quoting.shown(want)})"
                    lost.append(f"{name}: {who} {got}; the image declares {quoting.shown(value)}{how}")
        _fail_unless(not lost, "a login shell (as Enroot and Pyxis start every command) loses the image's "
                     "environment:\n  " + "\n  ".join(lost) + "\nfix: build the image with imagekit, or "
                     f"export it with `imagekit export --to enroot`: both put /{login_env_mod.PATH} first in "
                     "/etc/profile.d and drop an older imagekit's " + ", ".join(f"/{p}" for p in login_env_mod.LEGACY_PATHS))


def _env_of(b64: str) -> dict[str, str]:
    raw = base64.b64decode(b64 if b64 not in ("-", "NOSETPRIV") else "").decode(errors="replace")
    return dict(e.partition("=")[::2] for e in raw.split("\0") if "=" in e)


def _as_tuple(words: Any) -> Any:
    # Lists arrive from callers and JSON; a frozen check holds a tuple (hashable, and equal after a round trip).
    return tuple(words) if isinstance(words, list) else words


KINDS = tuple(_KIND_CLASSES)


def from_dict(spec: Mapping) -> Check:
    """A check from the label's JSON; see :meth:`Check.from_dict`."""
    return Check.from_dict(spec)


# The factories components call: thin aliases of the kinds' constructors.

def run(id: str, describe: str, command: str, expect: str | None = None, **kw: Any) -> Run:
    return Run(id=id, describe=describe, command=command, expect=expect, **kw)


def library(id: str, soname: str, **kw: Any) -> Library:
    return Library(id=id, soname=soname, **kw)


def file(id: str, path: str, **kw: Any) -> File:
    return File(id=id, path=path, **kw)


def absent(id: str, pattern: str, describe: str, **kw: Any) -> Absent:
    """``pattern``: globs separated by single spaces."""
    return Absent(id=id, describe=describe, patterns=tuple(pattern.split(" ")), **kw)


def python_import(id: str, module: str, **kw: Any) -> PythonImport:
    return PythonImport(id=id, module=module, **kw)


def ldd_closure(id: str, prefixes: list[str], **kw: Any) -> LddClosure:
    return LddClosure(id=id, prefixes=tuple(prefixes), **kw)


def login_env(id: str, uids: list[int | str], **kw: Any) -> LoginEnv:
    return LoginEnv(id=id, uids=tuple(str(u) for u in uids), **kw)
