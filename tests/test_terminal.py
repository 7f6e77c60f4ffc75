"""imagekit.util.terminal: someone else's text never drives the terminal (security-4 H9)."""

from __future__ import annotations

import io
import sys

from imagekit.util import terminal


def test_every_control_character_but_the_newline_is_shown_as_an_escape():
    text = "a\x1b[2Jb\x07\tc\rd\n\x00\x7f\x9b\u202e\u2028\u200b é 中 ok"
    out = terminal.printable(text)
    assert out == "a\\x1b[2Jb\\x07\\tc\\rd\n\\x00\\x7f\\x9b\\u202e\\u2028\\u200b é 中 ok"
    assert terminal.printable(out) == out          # escaping twice changes nothing


def test_the_escaping_streams_escape_text_and_let_imagekits_own_sequences_through(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with terminal.escaped_output():
        print("label \x1b]0;T\x07")
        terminal.unescaped(sys.stdout).write("\r\x1b[K")
    assert sys.stdout is out
    assert out.getvalue() == "label \\x1b]0;T\\x07\n\r\x1b[K"


def test_the_importers_log_escapes_what_it_quotes(capsys):
    from imagekit.export import pyxis_importer

    pyxis_importer.log("registry said: \x1b[2K\x1b[1Gverified")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "registry said: \\x1b[2K\\x1b[1Gverified" in err
