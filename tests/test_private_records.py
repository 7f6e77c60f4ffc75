"""Records in a directory that is this user's alone (imagekit.util.private_records): the read stamps, the
image platforms and the policy verdicts all stand on these rules, so each is shown to refuse here."""

from __future__ import annotations

import os

import pytest

from imagekit.util import private_records as records


def test_a_made_directory_is_private_and_a_record_round_trips(tmp_path):
    base = tmp_path / "a" / "verified"
    assert records.make_private_dir(base)
    assert oct(base.stat().st_mode & 0o777) == "0o700"
    records.write(base / "r.json", {"x": 1})
    assert records.read(base / "r.json") == {"x": 1}
    assert oct((base / "r.json").stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in base.iterdir()) == ["r.json"]          # no temporary left behind


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "a link", "another user's"])
def test_a_directory_others_could_write_or_swap_is_not_private(tmp_path, how):
    base = tmp_path / "d"
    base.mkdir(mode=0o700)
    if how == "group-writable":
        base.chmod(0o770)
    elif how == "world-writable":
        base.chmod(0o703)
    elif how == "a link":
        (tmp_path / "l").symlink_to(base)
        base = tmp_path / "l"
    else:
        if os.geteuid() != 0:
            (pytest.fail if os.environ.get("CI") else pytest.skip)("giving the directory away needs root")
        os.chown(base, 65534, 65534)
    assert not records.own_private_dir(base)
    assert not records.make_private_dir(base)


def test_a_linked_oversized_or_malformed_record_reads_as_none(tmp_path):
    base = tmp_path / "d"
    records.make_private_dir(base)
    records.write(base / "real.json", {"ok": True})
    (base / "link.json").symlink_to(base / "real.json")
    assert records.read(base / "link.json") is None
    (base / "big.json").write_text('{"pad": "' + "x" * 5000 + '"}')
    assert records.read(base / "big.json") is None and records.read(base / "big.json", 8192) == {"pad": "x" * 5000}
    (base / "junk.json").write_text("{")
    assert records.read(base / "junk.json") is None and records.read(base / "missing.json") is None
