"""``build.BuildRequest``: a bad build option is refused when the request is made, before any engine is asked."""

import pytest
from click.testing import CliRunner

from imagekit import build
from imagekit.cli import main
from imagekit.util.errors import UsageError


@pytest.mark.parametrize("kw, message", [
    (dict(target="debug"), "unknown target 'debug'"),
    (dict(engine_name="buildah"), "unknown engine 'buildah'"),
    (dict(engine_name="podman", cache_from=("reg/img:ci",)), "--cache-from and --inline-cache"),
    (dict(engine_name="podman", inline_cache=True), "--cache-from and --inline-cache"),
    (dict(ca_bundle="/no/such/bundle.pem"), "CA bundle '/no/such/bundle.pem' not found"),
])
def test_a_bad_option_fails_when_the_request_is_made(kw, message):
    with pytest.raises(UsageError, match=message):
        build.BuildRequest(**kw)


def test_the_request_holds_one_spelling_of_its_values(tmp_path):
    r = build.BuildRequest(tags=["a:1"], cache_from=["c:1"], log_dir=str(tmp_path), single_stage=True)
    assert r.tags == ("a:1",) and r.cache_from == ("c:1",) and r.log_dir == tmp_path
    assert r.target == "devel", "one stage is the devel stage"
    assert build.BuildRequest().target == "runtime" and build.BuildRequest().engine_name == "docker"


def test_the_cli_refuses_a_missing_ca_bundle_before_building(write_stack, tmp_path):
    """The stack's base image is missing too: had the build started (its base check comes first), that
    would be the error (exit 1). The request fails first: exit 2, the bundle named, no build log."""
    path = write_stack("name: no-base\nbase: {image: 'imagekit/debian:imagekit-test-never', distro: debian12}\n"
                       "components:\n  python: {}\n")
    logs = tmp_path / "logs"
    result = CliRunner().invoke(main, ["build", str(path), "--ca-bundle", str(tmp_path / "none.pem"),
                                       "--log-dir", str(logs)])
    assert result.exit_code == 2, result.output
    assert "none.pem' not found" in result.output and "not in the local engine" not in result.output
    assert not logs.exists()
