"""Untrusted text into generated files: one helper per target language, and refusals.

Everything imagekit writes that a shell, sbatch, a mount table or a recipe
parser reads back goes through a helper here: image metadata (labels, Env,
Cmd, Entrypoint, WorkingDir, Volumes) comes from whoever built the image, and
stack values and launch arguments come from files and command lines. A helper
either returns text that reads back as exactly the value given, or raises
:class:`UnsafeValue` naming where the value came from, the field and the value.

Non-UTF-8 bytes arrive in Python as lone surrogates (``surrogateescape``, how
``sys.argv`` carries them); :func:`encode` turns them back into the same bytes,
so a shell script receives the argument the user typed.
"""

from __future__ import annotations

import re

from imagekit.util.errors import UsageError

# Tab stays: it ends no line and is literal inside quotes; fields that split at whitespace say so.
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnsafeValue(UsageError):
    """A value that the target format cannot carry safely (exit code 2, nothing written)."""

    def __init__(self, where: str, field: str, value: str, why: str, hint: str | None = None) -> None:
        super().__init__(f"{where}: {field} {shown(value)} {why}", hint)
        self.where, self.field, self.value = where, field, value


def shown(value: str, limit: int = 80) -> str:
    """``value`` as a one-line Python literal, cut to ``limit`` characters (errors must not echo a
    megabyte, nor print a raw newline or escape sequence to the terminal)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 5] + "...'" + f" ({len(value)} characters)"


def encode(text: str) -> bytes:
    """UTF-8, with ``surrogateescape`` so that non-UTF-8 argv bytes are written back as they came."""
    return text.encode("utf-8", "surrogateescape")


def valid_text(value: str, where: str = "value", field: str = "text") -> str:
    """Any text that a file can hold: refused only for a NUL or an unpaired surrogate."""
    if "\x00" in value:
        raise UnsafeValue(where, field, value, "contains a NUL byte",
                          "no file, argument or environment variable can carry one; remove it")
    try:
        encode(value)
    except UnicodeEncodeError:
        raise UnsafeValue(where, field, value, "is not valid text (an unpaired surrogate)",
                          "use UTF-8 text") from None
    return value


def no_control(value: str, where: str, field: str, hint: str | None = None) -> str:
    """Refuse any control character (a newline ends a line in every line-oriented format)."""
    valid_text(value, where, field)
    m = CONTROL.search(value)
    if m:
        raise UnsafeValue(where, field, value, f"contains the control character {m.group()!r}",
                          hint or "remove it: this field is written into a line-oriented file")
    return value


# --- POSIX sh (and bash) ---------------------------------------------------------------------

def sh(word: str, where: str = "value", field: str = "word") -> str:
    """One shell word: single quotes, each ``'`` as ``'\\''``. Every byte but NUL is literal inside
    single quotes in every POSIX shell (newlines, ``$``, backticks, ``\\``), so this works under
    dash as well as bash, unlike bash's ``$'...'``."""
    valid_text(word, where, field)
    return "'" + word.replace("'", "'\\''") + "'"


_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def sh_arg(word: str, where: str = "value", field: str = "argument") -> str:
    """:func:`sh`, but a word of only safe characters stays bare (``shlex.quote``'s rule), so that
    generated sbatch scripts and wrappers read like hand-written ones."""
    valid_text(word, where, field)
    return word if _BARE.fullmatch(word) else sh(word, where, field)


def sh_words(words: list[str] | tuple[str, ...], where: str = "value", field: str = "words") -> str:
    return " ".join(sh(w, where, f"{field}[{i}]") for i, w in enumerate(words))


def sh_double(text: str, where: str = "value", field: str = "text") -> str:
    """Text for inside double quotes: ``\\``, ``"``, ``$`` and backticks escaped (the other
    characters, newlines included, are literal there)."""
    valid_text(text, where, field)
    for ch in ("\\", '"', "$", "`"):
        text = text.replace(ch, "\\" + ch)
    return text


def sh_comment(text: str, where: str = "value", field: str = "comment") -> str:
    """Text for after ``#``: only a newline ends a comment. Newlines become spaces, as Enroot's
    import does for labels (``gsub("\\n"; " ")`` in src/docker.sh); a carriage return would only
    hide the line's start on a terminal, so it becomes a space too."""
    valid_text(text, where, field)
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def env_name(name: str, where: str = "value", field: str = "environment variable name") -> str:
    """A variable name a shell can ``export`` and Enroot keeps (``[A-Za-z_][A-Za-z0-9_]*``)."""
    valid_text(name, where, field)
    if not ENV_NAME.fullmatch(name):
        raise UnsafeValue(where, field, name, "is not a valid variable name",
                          "names are letters, digits and '_', not starting with a digit")
    return name


# Linux refuses execve(2) with E2BIG when one argument or environment string is longer than
# MAX_ARG_STRLEN (32 pages: 131072 bytes with its NUL), and when all of them together pass
# ARG_MAX (a quarter of the stack limit: 2 MiB with the default 8 MiB). An image whose Env does
# either starts no program at all, under Docker, Enroot or Apptainer.
MAX_ENV_ENTRY = 131072 - 1
MAX_ENV_TOTAL = 2 << 20


def env_sizes(entries: list[str], where: str, field: str = "Env") -> None:
    """Refuse ``NAME=VALUE`` strings that no program could be started with (see MAX_ENV_ENTRY)."""
    total = 0
    for i, entry in enumerate(entries):
        size = len(encode(entry))
        total += size + 1
        if size > MAX_ENV_ENTRY:
            name = entry.partition("=")[0]
            raise UnsafeValue(where, f"{field}[{i}] ({shown(name, 40)})", entry,
                              f"is {size} bytes; Linux starts no program with an environment string over "
                              f"{MAX_ENV_ENTRY} bytes (execve: Argument list too long)",
                              "keep large data in a file in the image and put its path in the variable")
    if total > MAX_ENV_TOTAL:
        raise UnsafeValue(where, field, f"{len(entries)} variables", f"take {total} bytes together; Linux starts "
                          f"no program with more than {MAX_ENV_TOTAL} bytes of arguments and environment",
                          "keep large data in files in the image")


# --- Slurm ---------------------------------------------------------------------------------

# sbatch reads `#SBATCH` lines up to the first command; a value with a newline would end the line
# and put the rest in the script body, and whitespace splits the option.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")


def sbatch_value(value: str, field: str, where: str = "sbatch script") -> str:
    """A value for a ``#SBATCH --OPTION=VALUE`` line: refused unless it is one plain token."""
    valid_text(value, where, field)
    if not _SBATCH_VALUE.fullmatch(value):
        raise UnsafeValue(where, field, value, "cannot go on an #SBATCH line",
                          "use letters, digits and . , : @ % + = / _ - (no spaces or quotes)")
    return value


# --- Dockerfile and Singularity definitions --------------------------------------------------

def dockerfile_string(value: str, where: str = "recipe", field: str = "value") -> str:
    """A double-quoted Dockerfile word (LABEL, ENV): ``\\``, ``"`` and ``$`` escaped, so Docker
    neither ends the string nor substitutes build variables into it."""
    no_control(value, where, field)
    for ch in ("\\", '"', "$"):
        value = value.replace(ch, "\\" + ch)
    return f'"{value}"'


def definition_line(value: str, where: str = "definition file", field: str = "value") -> str:
    """A value on one line of a Singularity/Apptainer definition file (header or %labels)."""
    return no_control(value, where, field)
