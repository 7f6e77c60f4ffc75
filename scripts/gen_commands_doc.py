"""docs/commands.md from the click command tree: every command, argument and option, with its default,
its environment variable and its help; each command's own help text with its examples; the Pyxis
importers' help; the exit codes.

Nothing here names a command: the tree is walked (imagekit.cli.tree), so a new command, option or
sub-command (launch's, made from its rows) appears on the next run. scripts/gen_docs.py writes the page;
tests/test_docs.py fails when the checked-in page differs from a fresh rendering.
"""

from __future__ import annotations

import inspect
import re
import textwrap

import click

from imagekit.cli import main, tree
from imagekit.export import pyxis_importer
from imagekit.util.errors import EXIT_CODES

TITLE = "# Commands"


def _cell(text: str) -> str:
    # A `|` inside a table cell would end the cell.
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that may hold backquotes or pipes (a choice list, a shell line)."""
    fence = "``" if "`" in text else "`"
    inner = f" {text} " if fence == "``" else text
    return f"{fence}{inner}{fence}".replace("|", "\\|")


def help_blocks(text: str) -> list[str]:
    """click help text as Markdown: a paragraph that starts with ``\\b`` (click's "do not rewrap") is
    kept as written, in a code block; the others are prose."""
    out = []
    for para in re.split(r"\n\s*\n", inspect.cleandoc(text or "")):
        if not para.strip():
            continue
        if para.lstrip().startswith("\b"):
            body = para.split("\b", 1)[1].strip("\n")
            out += ["```", textwrap.dedent(body).rstrip(), "```", ""]
        else:
            out += [" ".join(para.split()), ""]
    return out


# click 8.3+ marks "no default given" with a sentinel of its own; older clicks use None.
_UNSET = getattr(click.core, "UNSET", None)


def _value(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice):
        return " \\| ".join(_code(str(c)) for c in param.type.choices)
    metavar = param.metavar or param.type.name.upper()
    return _code(metavar) + (" (repeatable)" if getattr(param, "multiple", False) else "")


def _default(param: click.Parameter, ctx: click.Context) -> str:
    if param.required:
        return "required"
    default = param.get_default(ctx, call=False)
    if callable(default) or default is _UNSET or default in (None, (), [], ""):
        return "—"
    if isinstance(param, click.Option) and param.is_flag and not param.secondary_opts:
        return "off" if not default else "on"
    if isinstance(default, bool) and isinstance(param, click.Option) and param.secondary_opts:
        return _code(param.opts[0] if default else param.secondary_opts[0])
    if isinstance(default, (list, tuple)):
        default = ",".join(map(str, default))
    return _code(str(default))


def _names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return _code(param.human_readable_name)
    return ", ".join(_code(o) for o in [*param.opts, *param.secondary_opts])


def _what(param: click.Parameter) -> str:
    text = getattr(param, "help", None) or ""
    envvar = getattr(param, "envvar", None)
    if envvar:
        text += ("; " if text else "") + "environment: " + ", ".join(
            f"${e}" for e in ([envvar] if isinstance(envvar, str) else envvar))
    return _cell(text) if text else ("see the help above" if isinstance(param, click.Argument) else "")


def params_table(cmd: click.Command, ctx: click.Context) -> list[str]:
    helps = set(ctx.help_option_names)
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False) and not set(p.opts) & helps]
    rows = ["| argument or option | value | default | what |", "|---|---|---|---|"]
    for p in params:
        rows.append(f"| {_names(p)} | {_value(p)} | {_default(p, ctx)} | {_what(p)} |")
    return rows


def _anchor(path: tuple[str, ...]) -> str:
    return "-".join(("imagekit", *path))


def command_section(path: tuple[str, ...], cmd: click.Command, ctx: click.Context) -> list[str]:
    name = " ".join(("imagekit", *path))
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out = [f"## {name}", "", f"`{name} {usage}`".replace("  ", " "), ""]
    out += help_blocks(cmd.help or "")
    if isinstance(cmd, click.Group):
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        out += ["Sub-commands: " + ", ".join(f"[{n}](#{_anchor((*path, n))})" for n, c in subs
                                             if c is not None and not c.hidden) + ".", ""]
    out += params_table(cmd, ctx) + ["", "`-h`, `--help` shows this command's help.", ""]
    if cmd.epilog and path:
        out += help_blocks(cmd.epilog)
    return out


def render(note: str) -> str:
    """docs/commands.md as it should be for the command tree in this checkout; ``note`` says how it is made."""
    commands = list(tree.walk(main))
    out = [TITLE, "", note, "",
           "Every command, argument and option, with its default, as the code declares them; each command's "
           "help with its examples (`imagekit COMMAND --help` prints the same). A command whose output a "
           "script reads has `--json`.", "",
           "| command | does |", "|---|---|"]
    for path, cmd, _ctx in commands[1:]:
        out.append(f"| [{' '.join(('imagekit', *path))}](#{_anchor(path)}) | {_cell(cmd.get_short_help_str(200))} |")
    out += ["| [imagekit-pyxis-importer](#imagekit-pyxis-importer), imagekit-pyxis-importer-signed | Pyxis's "
            "importer: a registry image as an Enroot squashfs (the signed one: only what the site's policy "
            "accepts) |", ""]
    for path, cmd, ctx in commands:
        out += command_section(path, cmd, ctx)
    out += ["## imagekit-pyxis-importer", "",
            "`imagekit-pyxis-importer-signed` takes the same arguments and serves only what the site's "
            "signature policy (`IMAGEKIT_POLICY`) accepts ([signing.md](signing.md)).", "",
            "```", pyxis_importer.HELP.strip("\n"), "```", "",
            "## Exit codes", "", "The same for every command and for the importers "
            "([errors.md](errors.md) lists the errors a site meets, with theirs).", "",
            "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {_cell(what)} |" for code, what in EXIT_CODES.items()]
    return "\n".join(out).rstrip("\n") + "\n"
