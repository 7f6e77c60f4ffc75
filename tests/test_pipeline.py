"""`imagekit build STACK --export enroot,sif`: build -> check -> export, and nothing exported on a red check."""

import json

import pytest
from click.testing import CliRunner

from imagekit.cli import main

pytestmark = pytest.mark.engine


def test_build_checks_then_exports_both_formats(mpi_image, tmp_path):
    result = CliRunner().invoke(main, ["build", "debian-mpi", "--export", "enroot,sif", "-o", str(tmp_path / "out"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)[0]
    assert entry["check"]["ok"] and entry["check"]["counts"]["failed"] == 0
    paths = sorted(e["path"] for e in entry["exports"])
    assert [p.rsplit("/", 1)[1] for p in paths] == ["debian-mpi.sif", "debian-mpi.sqsh"]
    for e in entry["exports"]:
        assert (tmp_path / "out" / e["path"].rsplit("/", 1)[1]).stat().st_size == e["bytes"] > 100_000_000
    assert not list((tmp_path / "out").glob(".*part")), "no temporary files left behind"


def test_a_failing_check_stops_before_export(base_image, write_stack, tmp_path):
    path = write_stack("""\
name: red-check
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  python: {}
checks:
  - {name: impossible, run: "test -e /no/such/file"}
""")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(path), "--export", "enroot", "-o", str(out),
                                       "--log-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAIL stack.impossible" in result.output and "nothing exported" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_build_export_goes_through_the_named_store_or_none(mpi_image, tmp_path):
    """`build --export` takes --store/--no-store like `imagekit export`: the second build of an
    unchanged image is a store hit, and --no-store converts without making an entry."""
    store, out = tmp_path / "store", tmp_path / "out"

    def build(*extra: str) -> dict:
        result = CliRunner().invoke(main, ["build", "debian-mpi", "--no-check", "--export", "enroot",
                                           "-o", str(out), "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)[0]["exports"][0]

    first = build("--store", str(store))
    assert first["store_entry"].startswith(str(store)) and not first["store_hit"]
    assert build("--store", str(store))["store_hit"]
    direct = build("--no-store")
    assert direct["store_entry"] == "" and not direct["store_hit"]
    assert (out / "debian-mpi.sqsh").stat().st_size == direct["bytes"]


def test_an_unknown_export_format_is_refused_before_building(tmp_path):
    """With an engine that could build, `--export enrot` fails first: no build log, no output."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "debian-mpi", "--export", "enroot,enrot", "-o", str(out),
                                       "--log-dir", str(logs)])
    assert result.exit_code == 2, result.output
    assert "unknown export format 'enrot'" in result.output and "use one of: enroot, sif" in result.output
    assert not logs.exists() and not out.exists()
