"""The quoting helpers, proven by the shells that read their output (dash as sh, and bash).

Property: whatever hostile text goes in, the shell hands back exactly those bytes, and the
payload (which would create ``$IK_CANARY``) never runs. NUL, which no shell word can carry,
is refused with the field named.
"""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import HealthCheck, given, settings

from helpers.hostile import CANARY_VAR, REPRODUCER, nul_free_lists, nul_free_words, words
from imagekit.util import quoting

SHELLS = ("sh", "bash")
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(shell: str, script: str, tmp_path) -> bytes:
    path = tmp_path / "script.sh"
    path.write_bytes(quoting.encode(script))
    proc = subprocess.run([shell, str(path)], capture_output=True, timeout=30, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", CANARY_VAR: str(tmp_path / "canary")})
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "canary").exists(), "an injected command ran"
    return proc.stdout


@PROPERTY
@given(words=nul_free_lists)
@pytest.mark.parametrize("shell", SHELLS)
def test_sh_words_round_trip(shell, words, tmp_path):
    out = _run(shell, "printf '%s\\0' START " + quoting.sh_words(words) + "\n", tmp_path)
    assert out.split(b"\0")[1:-1] == [quoting.encode(w) for w in words]


@PROPERTY
@given(text=nul_free_words)
@pytest.mark.parametrize("shell", SHELLS)
def test_sh_double_round_trip(shell, text, tmp_path):
    assert _run(shell, f'printf %s "{quoting.sh_double(text)}"\n', tmp_path) == quoting.encode(text)


@PROPERTY
@given(text=nul_free_words)
@pytest.mark.parametrize("shell", SHELLS)
def test_sh_comment_stays_a_comment(shell, text, tmp_path):
    assert _run(shell, f"# {quoting.sh_comment(text)}\necho ok\n", tmp_path) == b"ok\n"


@given(word=words.filter(lambda w: "\x00" in w))
def test_nul_is_refused_naming_the_field(word):
    with pytest.raises(quoting.UnsafeValue, match=r"image x: Cmd\[0\] .* contains a NUL byte"):
        quoting.sh(word, "image x", "Cmd[0]")


@pytest.mark.parametrize("word", ["plain", "a b", "it's", "$HOME", "", "back\\slash", 'q"uote', "caf\u00e9"])
def test_sh_matches_bash_at_q_without_control_characters(word):
    """Byte parity with Enroot's /etc/rc, which quotes with bash's ${word@Q}."""
    bash = subprocess.run(["bash", "-c", 'printf %s "${1@Q}"', "_", word],
                          capture_output=True, text=True, check=True).stdout
    assert quoting.sh(word) == bash


def test_reproducer_label_becomes_one_comment_line():
    assert quoting.sh_comment(REPRODUCER) == "note harmless echo INJECTED >> /mnt/proof"


@given(value=words)
def test_sbatch_value_accepts_only_one_plain_token(value):
    try:
        out = quoting.sbatch_value(value, "--job-name")
    except quoting.UnsafeValue as exc:
        assert "--job-name" in str(exc) and "\n" not in exc.message
        return
    assert out == value and value and not any(c.isspace() or c in "'\"`$;&|#\\" for c in value)


@given(value=words)
def test_no_control_refuses_every_line_break(value):
    try:
        quoting.no_control(value, "stack.yaml", "description")
    except quoting.UnsafeValue as exc:
        assert exc.field == "description" and "\n" not in exc.message
        return
    assert "\n" not in value and "\r" not in value and "\x00" not in value


@given(value=words)
def test_dockerfile_string_escapes_what_docker_would_expand(value):
    try:
        out = quoting.dockerfile_string(value)
    except quoting.UnsafeValue:
        assert quoting.CONTROL.search(value) or "\udc80" in value or "\x00" in value
        return
    inner = out[1:-1]
    assert out[0] == out[-1] == '"' and "\n" not in out
    # Every quote, backslash and $ inside is escaped: unescape and get the value back.
    unescaped, i = [], 0
    while i < len(inner):
        if inner[i] == "\\":
            assert inner[i + 1] in '\\"$'
            unescaped.append(inner[i + 1])
            i += 2
        else:
            assert inner[i] not in '"$'
            unescaped.append(inner[i])
            i += 1
    assert "".join(unescaped) == value


def test_error_shows_long_values_cut_and_on_one_line():
    with pytest.raises(quoting.UnsafeValue) as info:
        quoting.no_control("x" * 5000 + "\n", "image big", "label note")
    assert len(info.value.message) < 200 and "5001 characters" in info.value.message
