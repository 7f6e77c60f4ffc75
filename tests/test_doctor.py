"""`imagekit doctor` on a made-up site: Pyxis's line in an included plugstack file, the importer wrapper
it names, the policy and keys the wrapper exports, a shared store; each read where it lives. The
mistake review 4 found (a site policy that the wrapper leaves out, so unsigned images are served) is a
PROBLEM and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit import doctor

IMPORTER = Path(sys.executable).parent / "imagekit-pyxis-importer"


def _imagekit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True, text=True)


@pytest.fixture
def site(tmp_path):
    """plugstack.conf includes pyxis.conf, whose line names a wrapper exporting a store and a policy."""
    subprocess.run([sys.executable, "-m", "imagekit", "keygen", str(tmp_path / "ci-2026")], check=True,
                   capture_output=True)
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nkeys:\n  ci-2026: {path: ci-2026.pub, not-after: 2099-01-31}\n"
                      "repositories:\n  - match: reg.example:5000/hpc/*\n    signers: [ci-2026]\n")
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-m", "imagekit", "store", "--store", str(store), "init"], check=True,
                   capture_output=True)
    wrapper = tmp_path / "imagekit-importer"
    wrapper.write_text(f"#!/bin/sh\nexport IMAGEKIT_SHARED_STORE={store}\nexport IMAGEKIT_POLICY={policy}\n"
                       f'exec {IMPORTER}-signed "$@"\n')
    wrapper.chmod(0o755)
    (tmp_path / "plugstack.conf.d").mkdir()
    (tmp_path / "plugstack.conf.d" / "pyxis.conf").write_text(
        f"required /usr/lib/slurm/spank/pyxis.so importer={wrapper}\n")
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"# the site's spank plugins\ninclude {tmp_path}/plugstack.conf.d/*.conf\n")
    return {"plugstack": plugstack, "wrapper": wrapper, "policy": policy, "store": store}


def _findings(result: subprocess.CompletedProcess) -> dict[str, dict]:
    return {f["what"]: f for f in json.loads(result.stdout)}


def test_a_whole_site_on_one_screen(site):
    result = _imagekit("doctor", "--plugstack", str(site["plugstack"]), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    found = _findings(result)
    assert found["pyxis"]["status"] == "ok" and f"importer={site['wrapper']}" in found["pyxis"]["detail"]
    assert found["importer"]["status"] == "ok"
    assert "runs imagekit-pyxis-importer-signed" in found["importer"]["detail"]
    assert f"IMAGEKIT_POLICY={site['policy']}" in found["importer"]["detail"]
    assert found["policy"] == {"what": "policy", "status": "ok", "detail": f"{site['policy']}: 1 rules"}
    assert found["key ci-2026"]["status"] == "ok" and "until 2099-01-31" in found["key ci-2026"]["detail"]
    assert found["store"]["status"] == "ok" and "0 entries" in found["store"]["detail"]
    for tool in doctor.TOOLS:
        assert tool in found
    # The text form: one line per finding, each marked.
    text = _imagekit("doctor", "--plugstack", str(site["plugstack"])).stdout.splitlines()
    assert len(text) == len(found) and all(line.split()[0] in ("OK", "WARN", "PROBLEM", "-") for line in text)


def test_a_site_policy_the_wrapper_leaves_out_is_a_problem(site):
    wrapper = site["wrapper"]
    wrapper.write_text(f"#!/bin/sh\nexport IMAGEKIT_SHARED_STORE={site['store']}\nexec {IMPORTER} \"$@\"\n")
    result = _imagekit("doctor", "--plugstack", str(site["plugstack"]), "--site-policy", str(site["policy"]),
                       "--json")
    assert result.returncode == 1
    policy = _findings(result)["policy"]
    assert policy["status"] == "problem" and "unsigned images are served" in policy["detail"]
    assert f"export IMAGEKIT_POLICY={site['policy']}" in policy["detail"]


@pytest.mark.parametrize("damage, what, says", [
    ("signed-without-policy", "importer", "refuses every image"),
    ("not-executable", "importer", "not executable by job users"),
    ("broken-policy", "policy", "the importer refuses every image"),
    ("expired-key", "key ci-2026", "expired 2020-01-31"),
])
def test_each_mistake_is_named_where_it_lives(site, damage, what, says):
    if damage == "signed-without-policy":
        site["wrapper"].write_text(f'#!/bin/sh\nexec {IMPORTER}-signed "$@"\n')
    elif damage == "not-executable":
        site["wrapper"].chmod(0o700)
    elif damage == "broken-policy":
        site["policy"].write_text("version: 1\nkeys: {}\n")
    else:
        site["policy"].write_text(site["policy"].read_text().replace("2099-01-31", "2020-01-31"))
    result = _imagekit("doctor", "--plugstack", str(site["plugstack"]), "--json")
    assert result.returncode == 1
    finding = _findings(result)[what]
    assert finding["status"] == "problem" and says in finding["detail"], finding


def test_no_pyxis_here_is_said_not_failed(tmp_path):
    (tmp_path / "plugstack.conf").write_text("optional /usr/lib/slurm/spank/other.so\n")
    found = _findings(_imagekit("doctor", "--plugstack", str(tmp_path / "plugstack.conf"), "--json"))
    assert found["pyxis"]["status"] == "absent"
