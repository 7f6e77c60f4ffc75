"""schema: typed options, defaults, did-you-mean, and errors located at file:line: key."""

from __future__ import annotations

import pytest

from imagekit.util import schema, yamlpos
from imagekit.util.errors import StackError
from imagekit.util.schema import Option
from helpers.stack_helpers import expect_error, write

OPTIONS = {
    "version": Option(str, None, "a quoted version"),
    "cuda": Option(bool, False),
    "jobs": Option(int, 2),
    "flavor": Option(str, "inbox", choices=("doca", "mlnx", "inbox")),
    "packages": Option(list, [], item_type=str),
    "name": Option(str, None, "the name", required=True),
}


def load(tmp_path, text):
    path = write(tmp_path, text)
    return path, yamlpos.load(path)


def test_defaults_are_filled_and_lists_copied(tmp_path):
    _, data = load(tmp_path, "name: x\n")
    out = schema.validate(data, OPTIONS, context="c")
    assert out == {"version": None, "cuda": False, "jobs": 2, "flavor": "inbox", "packages": [], "name": "x"}
    out["packages"].append("p")
    assert OPTIONS["packages"].default == [], "a default list was shared and mutated"


def test_null_means_default(tmp_path):
    _, data = load(tmp_path, "name: x\njobs:\n")
    assert schema.validate(data, OPTIONS, context="c")["jobs"] == 2


def test_unknown_key_did_you_mean(tmp_path):
    path, data = load(tmp_path, "name: x\nverison: '1'\n")
    err = expect_error(lambda: schema.validate(data, OPTIONS, context="components.ucx"), path, 2,
                       "components.ucx.verison", "unknown key", "did you mean 'version'?")
    assert "valid keys: cuda, flavor, jobs, name, packages, version" in err.hint


def test_unknown_key_without_a_close_match_lists_valid_keys(tmp_path):
    path, data = load(tmp_path, "name: x\nzzzz: 1\n")
    err = expect_error(lambda: schema.validate(data, OPTIONS, context=""), path, 2, "zzzz", "unknown key")
    assert "did you mean" not in err.hint and "valid keys:" in err.hint


@pytest.mark.parametrize("value", ["12.4", "12.10", "5"])
def test_number_for_a_string_says_quote_it(tmp_path, value):
    path, data = load(tmp_path, f"name: x\nversion: {value}\n")
    expect_error(lambda: schema.validate(data, OPTIONS, context="components.cuda"), path, 2,
                 "components.cuda.version", "expected a string, got the number", "quote it: version: \"")


@pytest.mark.parametrize("text, expected", [
    ("cuda: 'yes'", "expected true or false, got str 'yes'"),
    ("cuda: 1", "expected true or false, got int 1"),
    ("jobs: true", "expected an integer, got the boolean true"),
    ("jobs: [1]", "expected an integer, got a list"),
    ("packages: {a: 1}", "expected a list, got a mapping"),
    ("version: true", "expected a string, got the boolean true"),
])
def test_wrong_types(tmp_path, text, expected):
    path, data = load(tmp_path, f"name: x\n{text}\n")
    key = text.split(":")[0]
    expect_error(lambda: schema.validate(data, OPTIONS, context="c"), path, 2, f"c.{key}", expected, fix=False)


def test_choices_did_you_mean(tmp_path):
    path, data = load(tmp_path, "name: x\nflavor: doka\n")
    err = expect_error(lambda: schema.validate(data, OPTIONS, context="components.ofed"), path, 2,
                       "components.ofed.flavor", "invalid value 'doka'", "did you mean 'doca'?")
    assert "valid: doca, mlnx, inbox" in err.hint


def test_list_item_type_is_located_at_the_item(tmp_path):
    path, data = load(tmp_path, "name: x\npackages:\n  - a\n  - 3\n")
    expect_error(lambda: schema.validate(data, OPTIONS, context="c"), path, 4, "c.packages",
                 "item 2 must be a string, got int 3", fix=False)


def test_missing_required_key(tmp_path):
    path, data = load(tmp_path, "jobs: 1\n")
    expect_error(lambda: schema.validate(data, OPTIONS, context="base"), path, 1, "base",
                 "missing required key 'name'", "add `name:`")


def test_top_level_context_has_no_leading_dot(tmp_path):
    path, data = load(tmp_path, "name: 5\n")
    with pytest.raises(StackError) as info:
        schema.validate(data, OPTIONS, context="")
    assert info.value.key == "name"
