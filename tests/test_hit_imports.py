"""Each hit path loads what it uses and nothing more: the Pyxis importer's repeat hit, the signed
importer's, and a re-export of an unchanged image (an export store hit). What a module costs to import
is most of what these paths cost (perf-4, P4-2); the times are bench/hits.py's, the sets are held here.

Each path runs as its caller runs it, a whole process, against a real registry and store; the modules
it had loaded when it exited are compared with what it must not load: the converters, the tar
pipeline's runner, the SBOM and provenance code, requests (and what it brings), the docker package,
and cryptography where nothing is verified or signed, or where a verdict recorded for the same policy
bytes spares the signed importer's check (:mod:`imagekit.export.pyxis_verdicts`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from imagekit.attest import keys
from helpers.pyxis_calls import job_env

pytestmark = pytest.mark.engine

NEVER_ON_A_HIT = {
    # what converts: the format writers, the squashfs tool's runner, the fill program
    "imagekit.export.enroot", "imagekit.export.sif", "imagekit.export.squash", "imagekit.export.singularity_d",
    "imagekit.export.pyxis_fill", "imagekit.export.artifacts",
    # the SBOM, the provenance and signing them
    "imagekit.export.signing", "imagekit.attest.sbom", "imagekit.attest.spdx", "imagekit.attest.provenance",
    "imagekit.attest.inventory", "imagekit.attest.signer", "cyclonedx", "spdx_tools", "packageurl",
    "securesystemslib",
    # HTTP and the engine through libraries: the registry client and the engine's socket are the stdlib's
    "requests", "urllib3", "charset_normalizer", "idna", "docker",
}
# An importer's registry hit starts no process, copies and writes no file but its hold, and asks no engine:
# each of these cost the repeat hit milliseconds it did not use (bench/hits.py).
REGISTRY_HIT = {"imagekit.engines", "subprocess", "shutil", "tempfile", "secrets", "uuid", "imagekit.sif_reader"}
VERIFYING = {"cryptography", "imagekit.attest.keys", "imagekit.attest.dsse", "imagekit.attest.verifier",
             "imagekit.attest.policy", "imagekit.export.pyxis_policy"}

PROBE = textwrap.dedent("""\
    import atexit, importlib, json, sys
    out, entry, *args = sys.argv[1:]
    atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
    sys.argv = [entry, *args]
    module, _, function = entry.partition(":")
    main = getattr(importlib.import_module(module), function)
    sys.exit(main(args) if entry.startswith("imagekit.export.") else main(args, prog_name="imagekit"))
    """)


def loaded(entry: str, args: list[str], env: dict[str, str], out: Path) -> tuple[set[str], str]:
    """The modules a process of ``entry`` (``module:function``) had loaded when it exited, and its log."""
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), entry, *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # A miss becomes the fill program (exec): no exit here, so nothing is written.
    return (set(json.loads(out.read_text())) if out.exists() else set()), proc.stderr + proc.stdout


def _hits(names: set[str], forbidden: set[str]) -> list[str]:
    return sorted(n for n in names if n in forbidden or n.split(".")[0] in forbidden)


@pytest.fixture(scope="module")
def signed_push(base_image, registry, tmp_path_factory):
    """The base image pushed with its .sqsh and signed statements; a policy that trusts the key."""
    work = tmp_path_factory.mktemp("hits")
    keys.write_pair(keys.generate(), work / "ci")
    policy = work / "policy.yaml"
    policy.write_text(f'version: 1\nkeys: {{ci: {{path: {work}/ci.pub}}}}\n'
                      'repositories: [{match: "*/ik-hits/*", signers: [ci]}]\n')
    env = {**os.environ, "IMAGEKIT_STORE": str(work / "push-store")}
    subprocess.run([str(Path(sys.executable).parent / "imagekit"), "push", base_image, "--to",
                    f"{registry}/ik-hits/base:1", "--with", "enroot", "--sign", str(work / "ci.key"), "-q"],
                   env=env, check=True, capture_output=True)
    return f"docker://{registry}#ik-hits/base:1", policy, work


def _importer_env(work: Path, name: str, step: int, **extra: str) -> dict[str, str]:
    env = job_env(work / f"store-{name}", work / "run", step, **extra)
    env["XDG_CACHE_HOME"] = str(work / f"cache-{name}")
    # The site's Enroot configuration, literal as Enroot ships it: a value the shell must expand starts
    # one (and loads subprocess), which REGISTRY_HIT would then count against the hit.
    conf = work / "enroot.conf"
    conf.write_text("ENROOT_CONFIG_PATH /etc/imagekit-test-enroot-config\n")
    env["IMAGEKIT_ENROOT_CONF"] = str(conf)
    return env


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
def test_an_importer_hit_loads_no_converter_sbom_or_http_library(signed_push, signed):
    uri, policy, work = signed_push
    entry = "imagekit.export.pyxis_signed:main" if signed else "imagekit.export.pyxis_importer:main"
    name = "signed" if signed else "plain"
    extra = {"IMAGEKIT_POLICY": str(policy)} if signed else {"IMAGEKIT_TRUSTED_ARTIFACTS": "*/ik-hits/*"}
    # The first get fills the store (the pushed artifact, its statements beside it) and stamps the reader.
    loaded(entry, ["get", uri], _importer_env(work, name, 1, **extra), work / f"first-{name}.json")
    names, log = loaded(entry, ["get", uri], _importer_env(work, name, 2, **extra), work / f"hit-{name}.json")
    assert "store hit" in log, log
    # The signed importer's repeat hit: the verdict recorded by the first get holds (pyxis_verdicts).
    assert _hits(names, NEVER_ON_A_HIT | REGISTRY_HIT | VERIFYING) == []
    if signed:
        assert "checked before" in log, log
        # The policy changed: the same hit verifies in full again (and records the new verdict).
        policy.write_text(policy.read_text() + "# edited\n")
        names, log = loaded(entry, ["get", uri], _importer_env(work, name, 3, **extra), work / f"edited-{name}.json")
        assert "store hit" in log and "checked before" not in log, log
        assert "imagekit.export.pyxis_policy" in names and "cryptography" in names


def test_a_re_export_hit_loads_no_converter_signing_or_engine_library(base_image, tmp_path):
    env = {**os.environ, "IMAGEKIT_STORE": str(tmp_path / "store"), "IMAGEKIT_STATE": str(tmp_path / "state")}
    args = ["export", base_image, "--to", "enroot", "-o", str(tmp_path / "out.sqsh"), "--force", "--json", "-q"]
    first, _ = loaded("imagekit.cli:main", args, env, tmp_path / "first.json")
    assert "imagekit.export.enroot" in first                     # the probe sees a conversion's modules
    names, out = loaded("imagekit.cli:main", args, env, tmp_path / "hit.json")
    assert json.loads(out.strip().splitlines()[-1])["store_hit"], out
    assert _hits(names, NEVER_ON_A_HIT | VERIFYING) == []
