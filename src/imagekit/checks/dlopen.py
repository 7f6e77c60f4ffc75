"""The dlopen closure: every library a plugin or provider opens at run time by name must resolve.

``ldd`` never shows a ``dlopen``'d library, so an image can pass ``image.ldd_closure`` and still
lose a capability at run time without an error: libfabric built ``--enable-cuda-dlopen`` opens
exactly ``libcudart.so`` (the unversioned name, which only a -dev layout has), and without it
libfabric's CUDA memory support turns itself off with an INFO line (fourth CUDA review, J1).

Which names a library opens is upstream's knowledge, so each component declares them
(:meth:`Component.dlopens`: an :class:`Opens` per call site, citing it), and the check reads the
built binary's own strings to see which of them this build carries (a name compiled out, such
as libfabric's ROCm or Level Zero loaders, is not asked for). Each name the binary carries is
then resolved by the image's dynamic loader itself: ``LD_PRELOAD=NAME LD_BIND_NOW=1 /bin/true``
searches for a bare name exactly as ``dlopen(NAME, RTLD_NOW)`` does (LD_LIBRARY_PATH, the
ld.so cache, the default directories), loads what it needs and binds every symbol, and says
"cannot be preloaded" when any of that fails. No Python, compiler or binutils is needed in the
image. Names the host's driver provides (``libcuda.so.1``, ``libnvidia-ml.so.1``: the GPU runtime
mounts them) are reported, not resolved.

The check travels as a ``run`` check (its script is generated here), so any imagekit that can
check the image can run it.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from imagekit.checks.kinds import Run, run
from imagekit.util import quoting

IMAGE, DRIVER, OPTIONAL = "image", "driver", "optional"
_BY = (IMAGE, DRIVER, OPTIONAL)
_NAME = re.compile(r"lib[A-Za-z0-9_.+-]*(%s)?[A-Za-z0-9_.+-]*\.so(\.[0-9]+)*")
_BINARY = re.compile(r"(/[A-Za-z0-9_.+/-]+|lib[A-Za-z0-9_.+-]+\.so(\.[0-9]+)*)")
_ENV = re.compile(r"[A-Z_][A-Z0-9_]*")
_WHY = re.compile(r"[^|\n]*")


@dataclass(frozen=True)
class Opens:
    """One place where ``binary`` calls ``dlopen`` with a name: ``names`` are tried in turn (any one
    resolving is enough), ``by`` says who provides them (the image, the host's driver, or optional:
    reported when missing, never failing), ``why`` cites upstream's source. A name with ``%s`` is a
    template filled from the environment variable ``env`` (NCCL's ``libnccl-net-%s.so``); the binary
    need carry only the part before ``%s`` (NCCL 2.30 builds the name from "libnccl-net" and "%s-%s.so")."""

    binary: str                 # a path in the image, or a soname the loader resolves (libnccl.so.2)
    names: tuple[str, ...]
    why: str
    by: str = IMAGE
    env: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.names, str):
            object.__setattr__(self, "names", (self.names,))
        if self.by not in _BY:
            raise ValueError(f"Opens.by must be one of {', '.join(_BY)}, not {self.by!r}")
        if not _BINARY.fullmatch(self.binary):
            raise ValueError(f"Opens.binary {self.binary!r} is not an absolute path or a soname")
        for name in self.names:
            if not _NAME.fullmatch(name):
                raise ValueError(f"Opens name {name!r} is not a library name like libcudart.so")
            if ("%s" in name) != (self.env is not None):
                raise ValueError(f"Opens name {name!r}: a %s template needs env, and env needs one")
        if self.env is not None and not _ENV.fullmatch(self.env):
            raise ValueError(f"Opens.env {self.env!r} is not an environment variable name")
        if not _WHY.fullmatch(self.why):
            raise ValueError("Opens.why must be one line without '|'")

    def line(self) -> str:
        names = ",".join(f"{n}@{self.env}" if self.env else n for n in self.names)
        return f"{self.binary}|{self.by}|{names}|{self.why}"


# Reads the specs (one a line: binary|by|name[,name...]|why) from stdin. For each, the binary's
# strings say whether this build carries the name; a carried name is resolved by the loader.
_SCRIPT = r"""
missing=0; resolved=0; driver=0; absent=0; loads=" "
strings=$(mktemp); strings_of=; trap 'rm -f "$strings"' EXIT
# Does the binary carry NAME as a string of its own, or at the end of one (a linker may store
# "libgdrapi.so" as the tail of "Could not load libgdrapi.so")? Not inside a longer name:
# DT_NEEDED's "libcurl.so.4" is not the dlopen of "libcurl.so".
carries() { grep -q -E "(^|[^A-Za-z0-9_.+-])$(printf '%s' "$1" | sed 's/[.+]/\\&/g')\$" "$strings"; }
where() { ldconfig -p | awk -v n="$1" '$1 == n { print $NF; exit }'; }
# The loader's reason, from either of its messages: "cannot be preloaded (REASON): ignored" for the
# preloaded name, "error while loading shared libraries: REASON" for a library it needs.
why() { echo "$1" | sed -n 's/.*cannot be preloaded (\(.*\)).*/\1/p; s/.*error while loading shared libraries: //p; s/.*symbol lookup error: //p' | head -n 1; }
# The file the loader itself picks for a bare name (usr-merged /lib and /usr/lib alike).
loaded() { LD_TRACE_LOADED_OBJECTS=1 LD_PRELOAD="$1" /bin/true 2>/dev/null | awk -v n="$1" '$1 == n { print $3; exit }'; }
while IFS='|' read -r bin by names why; do
  [ -n "$bin" ] || continue
  case $bin in
    /*) path=$bin ;;
    *) path=$(where "$bin") ;;
  esac
  if [ -z "$path" ] || [ ! -e "$path" ]; then
    echo "MISSING  $bin: not in the image, so nothing it opens can be checked [$why]"; missing=$((missing + 1)); continue
  fi
  short=${bin##*/}
  # A library itself first: the libraries it links must be there before anything it opens matters. Only
  # a missing library counts: a helper library may leave symbols to the program that links it (libcxi's
  # libcxiutils), which image.ldd_closure judges. A program cannot be preloaded; ldd_closure covers it.
  case $short in *.so|*.so.*) ;; *) loads="$loads$path " ;; esac
  case $loads in *" $path "*) ;; *)
    err=$(LD_PRELOAD="$path" /bin/true 2>&1 | grep "cannot open shared object file")
    if [ -n "$err" ]; then
      echo "MISSING  $short does not load: $(why "$err")"
      missing=$((missing + 1))
    fi
    loads="$loads$path " ;;
  esac
  # The binary's strings (NUL-separated), once: those that name a library.
  if [ "$path" != "$strings_of" ]; then
    tr -c '[:print:]' '\n' < "$path" | grep -F lib > "$strings" || true
    strings_of=$path
  fi
  carried=; tried=
  for spec in $(echo "$names" | tr ',' ' '); do
    name=${spec%@*}
    if [ "$name" != "$spec" ]; then
      var=${spec#*@}; value=$(printenv "$var" || true)
      # The binary carries the template, or the part before %s: NCCL 2.2x writes "libnccl-net-%s.so",
      # 2.30+ joins "libnccl-net" and the name with "%s-%s.so".
      probe=${name%%%s*}; probe=${probe%-}
      if ! carries "$name" && ! carries "$probe"; then continue; fi
      if [ -z "$value" ]; then tried="$tried $name($var unset)"; continue; fi
      name=$(printf "$name" "$value")
    elif ! carries "$name"; then
      continue
    fi
    carried="$carried $name"
  done
  carried=${carried# }
  if [ -z "$carried" ]; then
    if [ -n "$tried" ]; then
      echo "MISSING  $short opens${tried}: the variable that names it is unset [$why]"; missing=$((missing + 1))
    else
      echo "absent   $short: this build does not open $(echo "$names" | sed 's/@[A-Z_]*//g') [$why]"; absent=$((absent + 1))
    fi
    continue
  fi
  if [ "$by" = driver ]; then
    echo "driver   $short opens $carried: the host's driver (the GPU runtime mounts it) [$why]"; driver=$((driver + 1))
    continue
  fi
  ok=; errs=
  for name in $carried; do
    err=$(LD_BIND_NOW=1 LD_PRELOAD="$name" /bin/true 2>&1) && [ -z "$err" ] && { ok=$name; break; }
    errs="$errs $name: $(why "$err")${err:+;}"
  done
  if [ -n "$ok" ]; then
    echo "ok       $short opens $ok -> $(loaded "$ok") [$why]"; resolved=$((resolved + 1))
  elif [ "$by" = optional ]; then
    echo "optional $short opens $carried: not found (an optional feature is off) [$why]"
  else
    echo "MISSING  $short opens $carried: the loader cannot find it or its libraries:$errs [$why]"
    missing=$((missing + 1))
  fi
done
echo "dlopen closure: $resolved resolved, $missing missing, $driver from the host's driver, $absent not in this build"
[ "$missing" -eq 0 ]
"""


def closure_check(opens: list[Opens], id: str = "image.dlopen_closure") -> Run:
    """One ``run`` check resolving every name in ``opens`` in the image (see the module's docstring).

    One line: the declarations as they read, piped into the script (base64, so that a failure's report
    shows the declarations and the script's output rather than the script)."""
    specs = " ".join(quoting.sh_arg(o.line()) for o in opens)
    script = base64.b64encode(_SCRIPT.encode()).decode()
    command = f"printf '%s\\n' {specs} | sh -c \"$(echo {script} | base64 -d)\""
    binaries = sorted({o.binary.rsplit('/', 1)[-1] for o in opens})
    return run(id, "every library " + ", ".join(binaries) + " open at run time by name (dlopen) resolves in "
               "the image (read from their strings and upstream's list, not ldd)", command,
               expect=r"dlopen closure: \d+ resolved, 0 missing")
