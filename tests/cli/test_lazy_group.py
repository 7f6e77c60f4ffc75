"""`imagekit --help` lists the commands from cli.SUMMARIES without importing their modules; the
summaries must say what each command's own help says."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from imagekit import cli


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_summary_is_the_commands_own_first_paragraph(name):
    command = cli.main.get_command(click.Context(cli.main), name)
    for limit in (30, 45, 80, 400):
        assert click.Command(name, help=cli.SUMMARIES[name]).get_short_help_str(limit) == \
            command.get_short_help_str(limit)


def test_every_command_has_a_summary():
    assert set(cli.SUMMARIES) == set(cli.COMMANDS)


def test_help_lists_every_command_and_imports_no_command_module():
    probe = ("import sys\n"
             "from imagekit.cli import main\n"
             "try:\n    main(['--help'], prog_name='imagekit')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('imagekit.cli.')))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    listed = out.split("Commands:")[1]
    assert all(f"  {name} " in listed for name in cli.COMMANDS)
    assert out.strip().splitlines()[-1] == "[]"
