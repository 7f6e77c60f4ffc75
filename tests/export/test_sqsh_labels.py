"""The labels a .sqsh keeps: one writer and one reader (issue 22, F10).

Enroot keeps an image's labels as ``# KEY VALUE`` comment lines at the top of /etc/rc. The reader
split that text with ``str.splitlines()``, which also breaks at U+2028, U+2029, U+0085, VT, FF and
FS/GS/RS, where sh sees one comment line: every later label was lost, or one label's value forged
another (``io.imagekit.benchmark``, whose environment launch used to run on the host). Now only
"\\n" ends a line for the reader too, and a label one line cannot carry (a line break in a value,
whitespace in a key) is refused at export, naming the image and the label, instead of changed.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.hostile import words
from imagekit import image_facts
from imagekit.util import quoting
from imagekit.image_facts import reader
from imagekit.export import enroot

# Every character str.splitlines() ends a line at, and sh does not.
SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
REAL = json.dumps({"command": ["all_reduce_perf", "-b", "8"], "env": {"NCCL_DEBUG": "INFO"}})
FORGED = json.dumps({"command": ["sh", "-c", "echo forged"], "env": {"BASH_ENV": "$(id > /tmp/PWNED-from-label)"}})
label_text = st.one_of(words, st.text(alphabet=st.sampled_from(SEPARATORS + list("ab #\n\r\t=")), max_size=12),
                       st.builds(lambda s, w: f"x{s}# {image_facts.BENCHMARK} {w}", st.sampled_from(SEPARATORS), words))


def _readable(key: str, value: str) -> bool:
    """What one `# KEY VALUE` line carries: a key without whitespace or control characters, a value
    without a line break, both UTF-8 text."""
    return bool(key) and not re.search(r"[\s\x00-\x1f\x7f]", key) and not re.search(r"[\n\r\x00\udc80-\udcff]", value) \
        and not re.search(r"[\udc80-\udcff]", key)


@given(labels=st.dictionaries(label_text, label_text, max_size=5))
def test_labels_read_back_as_written_or_are_refused_naming_the_label(labels):
    config = {"Labels": labels, "Cmd": ["/bin/true"]}
    try:
        rc = enroot.config_files(config, "hostile:1")["etc/rc"]
    except quoting.UnsafeValue as exc:
        assert exc.where == "image hostile:1" and exc.field.startswith("label") and "\n" not in exc.message
        assert not all(_readable(k, v) for k, v in labels.items())
        return
    assert all(_readable(k, v) for k, v in labels.items())
    assert image_facts.rc_labels(rc) == labels


def _sqsh(tmp_path: Path, config: dict) -> Path:
    """A .sqsh holding the files imagekit's export writes for ``config``."""
    root = tmp_path / "root"
    for path, text in enroot.config_files(config, "hostile:1").items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(quoting.encode(text))
    out = tmp_path / "x.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-quiet", "-no-progress", "-noappend"], check=True,
                   capture_output=True)
    return out


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_label_neither_forges_nor_hides_another(tmp_path, sep):
    """The red-team reproducer (r2b_labels.py): a later label's value carries `SEP# io.imagekit.benchmark
    {...}`, an earlier one a bare SEP; the Env carries `SEP NVIDIA_VISIBLE_DEVICES=all`. Read back
    from the .sqsh: every label as it was, the builder's benchmark, the Env as Enroot reads it."""
    labels = {image_facts.SCHEMA_LABEL: "2", image_facts.BENCHMARK: REAL, "aaa": f"line1{sep}line2",
              "zzz.vendor.note": f"harmless{sep}# {image_facts.BENCHMARK} {FORGED}"}
    # An Env value with a C0 control character is refused at export (one variable a line).
    env = [] if quoting.CONTROL.search(sep) else [f"NOTE=a{sep}NVIDIA_VISIBLE_DEVICES=all"]
    facts = reader.read(str(_sqsh(tmp_path, {"Labels": labels, "Env": env})))
    assert facts.labels == labels
    assert facts.benchmark == image_facts.Benchmark(["all_reduce_perf", "-b", "8"], {"NCCL_DEBUG": "INFO"})
    assert facts.env == image_facts.parse_env(env)
    assert "NVIDIA_VISIBLE_DEVICES" not in facts.env


def test_enroots_own_rc_reads_as_enroot_wrote_it():
    """`enroot import` writes labels unsorted, newlines made spaces, then a blank line (src/docker.sh)."""
    rc = ("# org.opencontainers.image.title demo\n# io.imagekit.schema 2\n# note two words  spaced \n\n"
          'mkdir -p "/" 2> /dev/null\n')
    assert image_facts.rc_labels(rc) == {"org.opencontainers.image.title": "demo", "io.imagekit.schema": "2",
                                         "note": "two words  spaced "}
    assert image_facts.rc_labels('mkdir -p "/" 2> /dev/null\n# not a label\n') == {}


@pytest.mark.parametrize("key,value,message", [
    ("note", "a\nb", r"label 'note' 'a\\nb' contains '\\n', which would end its comment line"),
    ("note", "a\rb", r"label 'note' 'a\\rb' contains '\\r'"),
    ("a b", "v", r"label name 'a b' contains ' ': in /etc/rc a label's name ends at its line's first space"),
    ("a\u2028b", "v", r"label name 'a\\u2028b' contains '\\u2028'"),
    ("", "v", r"label name '' is empty"),
    ("note", "\udcff", r"label 'note' '\\udcff' is not UTF-8 text"),
    ("note", "a\x00b", r"label 'note' 'a\\x00b' contains a NUL byte"),
])
def test_a_label_that_would_read_back_changed_is_refused(key, value, message):
    with pytest.raises(quoting.UnsafeValue, match=rf"^image site/img:1: {message}") as err:
        enroot.config_files({"Labels": {key: value}}, "site/img:1")
    assert err.value.hint


def test_sif_labels_that_are_not_text_give_a_reason(tmp_path, monkeypatch):
    """The SIF's labels come as JSON; anything but a mapping of text to text is a reason, not a crash."""
    path = tmp_path / "x.sif"
    path.write_bytes(b"SIF_MAGIC")
    for raw in ({"a": 1}, ["a"], "x"):
        monkeypatch.setattr(reader, "_sif_facts", lambda p, raw=raw: (reader._label_map(raw), None))
        facts = reader.read(str(path))
        assert facts.labels is None and "not a mapping" in facts.reason
