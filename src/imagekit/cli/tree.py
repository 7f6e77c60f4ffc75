"""The whole click command tree, walked generically: docs/commands.md (scripts/gen_commands_doc.py) and
the help-example tests read every command from here, so a command group that grows sub-commands (launch's,
made from its rows) is documented and tested with nothing else to change."""

from __future__ import annotations

from typing import Iterator

import click


def walk(cmd: click.Command, path: tuple[str, ...] = (), ctx: click.Context | None = None
         ) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """(path under ``imagekit``, command, its context) for ``cmd`` and every command below it, in the
    order ``--help`` lists them; hidden commands are left out, as ``--help`` leaves them."""
    ctx = ctx if ctx is not None else click.Context(cmd, info_name="imagekit")
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from walk(sub, path + (name,), click.Context(sub, parent=ctx, info_name=name))
