"""docs/errors.md from the code's error catalogue (imagekit.util.known_errors): each error a site meets,
the line imagekit prints, the fix it prints and the exit code. scripts/gen_docs.py writes the page;
tests/test_docs.py fails when it is stale, and tests/util/test_known_errors.py makes every entry happen."""

from __future__ import annotations

import re

from imagekit.util.errors import StackError
from imagekit.util.known_errors import CATALOGUE


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _shown(template: str) -> str:
    """A message template as the reader meets it: each ``{field}`` as an upper-case placeholder."""
    return re.sub(r"\{(\w+)(?:![rsa])?\}", lambda m: m.group(1).upper(), template)


def render(note: str) -> str:
    out = ["# Errors a site meets", "", note, "",
           "Each is one `imagekit: error:` line that names the file, reference or option, then one `fix:` line, "
           "and the exit code of the table in [commands.md](commands.md#exit-codes) (`imagekit --help` prints "
           "it). Nothing is left half-written: an output is written under a temporary name and renamed only "
           "when complete. Upper-case words stand for what the message fills in.", "",
           "| id | what the site did | what imagekit prints | fix | exit |", "|---|---|---|---|---|"]
    for known in CATALOGUE:
        # A stack file's error starts with where it is: the file, the line and the key.
        where = "FILE:LINE: KEY: " if issubclass(known.kind, StackError) else ""
        out.append(f"| `{known.id}` | {_cell(known.situation)} | {_cell(where + _shown(known.message))} | "
                   f"{_cell(_shown(known.fix))} | {known.exit_code} |")
    return "\n".join(out) + "\n"
