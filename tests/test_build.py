"""Real BuildKit builds: labels, cache reuse, failures, secrets, interrupts, matrix variants."""

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest
from click.testing import CliRunner

from imagekit import build, stack
from imagekit.engines import docker as engine
from imagekit.cli import main
from helpers.stack_helpers import assert_built_labels

pytestmark = pytest.mark.engine

TINY = """\
name: {name}
base: {{image: imagekit/debian:bookworm, distro: debian12}}
components:
  python: {{packages: [{pkg}]}}
"""


def _gone(ref: str) -> bool:
    return not engine.image_exists(ref)


def test_offline_image_records_stack_components_versions_and_recipe_hash(mpi_image):
    labels = engine.image_labels(mpi_image)
    assert_built_labels(labels, "debian-mpi")
    assert labels["io.imagekit.component.pmix.major"] == "4"


def test_no_change_rebuild_is_fully_cached(mpi_image):
    """Every step comes from the cache (the time it takes is measured in bench/build.py)."""
    result = build.build(stack.load("debian-mpi"))
    assert result.cached_steps == result.steps - 1 or result.cached_steps >= result.steps - 2
    assert result.image_id == engine.client().images.get(mpi_image).id


def test_a_failing_step_names_its_command_and_last_lines(base_image, write_stack, tmp_path):
    path = write_stack(TINY.format(name="broken-step", pkg="doesnotexist"))
    with pytest.raises(build.BuildError) as err:
        build.build(stack.load(path), build.BuildRequest(log_dir=tmp_path))
    text = str(err.value)
    assert "python3-doesnotexist" in text and "apt-get" in text  # the step's command
    assert "Unable to locate package python3-doesnotexist" in text  # its last lines
    assert (tmp_path / "broken-step-runtime.log").is_file()
    assert _gone("imagekit/broken-step:latest")
    # The CLI looks the package up in the base's archive first: refused before any build step.
    early = CliRunner().invoke(main, ["build", str(path), "--log-dir", str(tmp_path)])
    assert early.exit_code == 2 and "python3-doesnotexist" in early.output and "step: [" not in early.output
    result = CliRunner().invoke(main, ["build", str(path), "--log-dir", str(tmp_path), "--no-package-check"])
    assert result.exit_code == 1 and "step: [" in result.output and "full log:" in result.output


def test_ca_bundle_reaches_pip_as_a_secret_and_never_a_layer(base_image, write_stack, tmp_path):
    marker = f"imagekit-test-marker-{os.getpid()}-{time.time_ns()}"
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(open("/etc/ssl/certs/ca-certificates.crt").read() + f"\n# {marker}\n")
    path = write_stack("""\
name: secret-probe
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  python: {pip: ["six==1.16.0"]}
checks:
  - {name: six, run: "python3 -c 'import six; print(six.__version__)'", expect: "1.16.0"}
""")
    result = build.build(stack.load(path), build.BuildRequest(ca_bundle=str(bundle), no_cache=True, log_dir=tmp_path))
    saved = tmp_path / "image.tar"
    with open(saved, "wb") as out:
        subprocess.run([engine.docker_cli(), "save", result.image_id], stdout=out, check=True)
    found = []
    with tarfile.open(saved) as outer:
        for member in outer.getmembers():
            if member.isfile():
                data = outer.extractfile(member).read()
                if marker.encode() in data:
                    found.append(member.name)
    assert found == [], f"the CA bundle leaked into {found}"
    config = engine.client().images.get(result.image_id).attrs["Config"]
    assert not any("PIP_CERT" in e for e in config.get("Env") or [])
    subprocess.run([engine.docker_cli(), "rmi", "-f", *result.tags], capture_output=True)


def test_hostile_stack_values_build_as_data(base_image, write_stack, tmp_path):
    """Quotes, $VAR, $(), backticks, ; and # in a description and a pip requirement's marker
    (both accepted: they are valid text and a valid PEP 508 requirement) reach the image as data:
    the label reads back exactly and the payload never ran in any build step."""
    import yaml

    payload = "it's \"$HOME\" \\ $(touch /canary) `touch /canary`; touch /canary && # caf\u00e9"
    text = yaml.safe_dump({
        "name": "hostile-values", "description": payload,
        "base": {"image": "imagekit/debian:bookworm", "distro": "debian12"},
        "components": {"python": {"pip": ['six==1.16.0; platform_system != "$(touch /canary)"']}},
    }, allow_unicode=True)
    result = build.build(stack.load(write_stack(text)), build.BuildRequest(log_dir=tmp_path))
    labels = engine.image_labels(result.tags[0])
    assert labels["org.opencontainers.image.description"] == payload
    probe = subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "/bin/sh", result.tags[0], "-c",
                            "test ! -e /canary && /opt/venv/bin/python -c 'import six'"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    subprocess.run([engine.docker_cli(), "rmi", "-f", *result.tags], capture_output=True)


def test_ctrl_c_during_a_build_leaves_no_tag(base_image, write_stack, tmp_path):
    """Ctrl-C in a terminal signals the whole process group: imagekit and the docker CLI."""
    path = write_stack("""\
name: interrupted
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  python: {pip: ["numpy==2.1.3", "scipy==1.14.1"]}
""")
    subprocess.run([engine.docker_cli(), "rmi", "-f", "imagekit/interrupted:latest"], capture_output=True)
    proc = subprocess.Popen([sys.executable, "-m", "imagekit", "build", str(path), "--no-cache",
                             "--log-dir", str(tmp_path)], stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            # as in a terminal, even when the suite runs as a background job (SIGINT ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # wait until BuildKit runs a step (python3-venv install or pip)
        seen.append(line)
        if "venv" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0, "".join(seen)
    assert _gone("imagekit/interrupted:latest")


def test_missing_base_image_names_the_command_that_makes_it(write_stack):
    path = write_stack("name: needs-trixie\nbase: {image: imagekit/debian:trixie-missing, distro: debian12}\n")
    result = CliRunner().invoke(main, ["build", str(path)])
    assert result.exit_code == 1
    assert "imagekit base debian:trixie-missing" in result.output


def test_engine_unreachable_is_one_line_with_the_fix(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    proc = subprocess.run([sys.executable, "-m", "imagekit", "build", "debian-mpi"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "no Docker engine answers" in proc.stderr and "setup-engine.sh" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_stack_exits_2():
    result = CliRunner().invoke(main, ["build", "no-such-stack"])
    assert result.exit_code == 2 and "unknown stack" in result.output


def test_matrix_builds_every_variant_sharing_layers(base_image, write_stack, tmp_path):
    path = write_stack("""\
name: mx
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  sshd: {}
  python: {}
matrix:
  flavour:
    plain: {}
    yaml:
      components: {python: {packages: [yaml]}}
""")
    result = CliRunner().invoke(main, ["build", str(path), "--json", "--log-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    builds = [r["build"] for r in json.loads(result.stdout)]
    assert [b["tags"][0] for b in builds] == ["imagekit/mx-plain:latest", "imagekit/mx-yaml:latest"]
    assert builds[1]["cached_steps"] >= 2, "the second variant reuses the shared sshd layers"
    one = CliRunner().invoke(main, ["build", str(path), "--variant", "mx-yaml", "--json",
                                    "--log-dir", str(tmp_path)])
    assert [r["stack"] for r in json.loads(one.stdout)] == ["mx-yaml"]
    subprocess.run([engine.docker_cli(), "rmi", "-f", "imagekit/mx-plain:latest", "imagekit/mx-yaml:latest"],
                   capture_output=True)
