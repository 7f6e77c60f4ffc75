"""yamlpos: every mapping key remembers its file and line; malformed input is located."""

from __future__ import annotations

import pytest

from imagekit.util import yamlpos
from imagekit.util.errors import StackError
from helpers.stack_helpers import expect_error, write


def test_keys_record_file_and_line(tmp_path):
    path = write(tmp_path, """\
        # comment
        name: x
        base:
          image: a
          distro: debian12
        tags:
          - one
          - two
        """)
    data = yamlpos.load(path)
    assert data == {"name": "x", "base": {"image": "a", "distro": "debian12"}, "tags": ["one", "two"]}
    assert data.pos("name") == (str(path), 2)
    assert data.pos("base") == (str(path), 3)
    assert data["base"].pos("distro") == (str(path), 5)
    assert data["tags"].lines == [7, 8]
    # An unknown key falls back to the mapping's own position.
    assert data["base"].pos("nope") == (str(path), 4)


def test_flow_mapping_positions(tmp_path):
    path = write(tmp_path, "components:\n  ucx: {source: distro,\n        cuda: true}\n")
    ucx = yamlpos.load(path)["components"]["ucx"]
    assert ucx.pos("source")[1] == 2
    assert ucx.pos("cuda")[1] == 3


def test_empty_file_is_an_empty_mapping(tmp_path):
    path = write(tmp_path, "# nothing here\n")
    data = yamlpos.load(path)
    assert data == {} and data.file == str(path) and data.line == 1


def test_scalars_keep_yaml_types(tmp_path):
    path = write(tmp_path, 'a: 12.4\nb: "12.4"\nc: true\nd: 1\ne: ~\n')
    data = yamlpos.load(path)
    assert data == {"a": 12.4, "b": "12.4", "c": True, "d": 1, "e": None}
    assert isinstance(data["b"], str)


def test_non_string_keys_become_strings(tmp_path):
    data = yamlpos.load(write(tmp_path, "1: a\ntrue: b\n"))
    assert set(data) == {"1", "True"}


@pytest.mark.parametrize("text, line, fragment", [
    ("name: t\nbase:\n\timage: x\n", 3, "'\\t'"),               # tab indentation
    ("name: t\nbase:\n  image: x\n   distro: y\n", 4, "mapping values are not allowed"),
    ("name: t\nbase: {image: x\n", 2, "expected ',' or '}'"),   # unclosed: the opening line
    ("name: t\nbase:\n  image: [a\n\n\n", 3, "expected ',' or ']'"),
    ("name: 'abc\n", 1, "end of stream"),
    ("a: b\n- c\n", 2, "malformed YAML"),
])
def test_malformed_yaml_reports_the_line(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    err = expect_error(lambda: yamlpos.load(path), path, line, None, "malformed YAML", fragment)
    assert err.line <= len(text.splitlines()), "reported a line past the end of the file"


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, "name: a\nbase:\n  image: x\n  image: y\n")
    expect_error(lambda: yamlpos.load(path), path, 4, "image", "duplicate key (first written at line 3)",
                 fix=False)


def test_duplicate_top_level_key(tmp_path):
    path = write(tmp_path, "name: a\ntags: []\nname: b\n")
    expect_error(lambda: yamlpos.load(path), path, 3, "name", "duplicate key (first written at line 1)", fix=False)


def test_merge_keys_are_refused(tmp_path):
    path = write(tmp_path, "x: &a {k: 1}\ny:\n  <<: *a\n")
    expect_error(lambda: yamlpos.load(path), path, 3, None, "merge keys", "extends", fix=False)


def test_anchors_and_aliases_still_work(tmp_path):
    data = yamlpos.load(write(tmp_path, "x: &a {k: 1}\ny: *a\n"))
    assert data["y"] == {"k": 1}


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(StackError) as info:
        yamlpos.load(missing)
    assert str(info.value).startswith(f"{missing}: file not found")


def test_unreadable_path(tmp_path):
    with pytest.raises(StackError, match="cannot read"):
        yamlpos.load(tmp_path)  # a directory
