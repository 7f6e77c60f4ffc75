"""Hostile text for the property tests of every generated script and line-oriented file.

Each payload, if it ever ran as code, would create the file named by ``$IK_CANARY``; the tests
set that variable to a path they then check is absent. The strategies mix the payloads with
quotes of every kind, ``$()``, backticks, ``;``, ``&&``, ``#``, newlines, NUL, non-UTF-8 bytes
(as ``surrogateescape`` carries them), very long values and leading dashes.
"""

from __future__ import annotations

from hypothesis import strategies as st

CANARY_VAR = "IK_CANARY"
REPRODUCER = "note harmless\necho INJECTED >> /mnt/proof"

PAYLOADS = [
    '$(touch "$IK_CANARY")',
    '`touch "$IK_CANARY"`',
    "'; touch \"$IK_CANARY\"; '",
    '"; touch "$IK_CANARY"; "',
    '\ntouch "$IK_CANARY"\n',
    '\r\ntouch "$IK_CANARY"',
    "&& touch $IK_CANARY",
    "|| touch $IK_CANARY #",
    "x; touch $IK_CANARY",
    "${IFS}touch${IFS}$IK_CANARY",
    "$'\\n'touch $IK_CANARY",
    '\\"; touch $IK_CANARY; echo \\"',
    "}; touch $IK_CANARY; {",
    "EOF\ntouch $IK_CANARY\nEOF",
    "IMAGEKIT_RANK_WRAPPER\ntouch $IK_CANARY",
    "IMAGEKIT_EOF\ntouch $IK_CANARY",
    "#SBATCH --wrap=touch $IK_CANARY",
    "- a\n- b: {x: !!python/object/apply:os.system [touch $IK_CANARY]}",
    "--help",
    "-rf",
    "#",
    "",
    " ",
    "\\",
    "\\\\n",
    "'",
    '"',
    "%s%n%x",
    "\t",
    "caf\u00e9 \u2603 \U0001f600",
    "\udc80\udcff\udcfe",  # the bytes 0x80 0xff 0xfe, not UTF-8
    "\x00",
    "a\x00b",
    "\x1b[31mred",
    "x" * 5000,
]

_ALPHABET = st.sampled_from(list("ab /.-_=:,@'\"`$(){}[]<>|&;#!*?~\\\n\r\t\x00\x1b") + ["\udc80", "\u00e9"])

words = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(alphabet=_ALPHABET, max_size=40),
    st.builds(lambda a, b: a + b, st.sampled_from(PAYLOADS), st.text(alphabet=_ALPHABET, max_size=10)),
)
word_lists = st.lists(words, max_size=5)
nul_free_words = words.filter(lambda w: "\x00" not in w)
nul_free_lists = st.lists(nul_free_words, max_size=5)


def canary_env(path) -> dict[str, str]:
    return {CANARY_VAR: str(path)}
