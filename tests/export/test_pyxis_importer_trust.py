"""What the Pyxis importer serves, and who decides it (README "The export store: who may publish").

Regression tests for ../shared/reviews/security-2.md: F3 (a pushed referrer decided the root
filesystem of a digest-pinned image, and poisoned the local export's key), F4 (the
``enroot import`` fallback always crashed), F5 (a ``--squash-opt`` variant was served), F20
(one bad referrer annotation aborted the importer), and F2/F6 end to end: two unprivileged
users and a site's shared store, the importer called as Pyxis calls it (pyxis_calls.py).
The registry, Enroot and the store are real; "no engine" is DOCKER_HOST pointing nowhere.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.pyxis_calls import is_squashfs, job_env, pyxis_get, pyxis_release
from helpers.users import ALICE, BOB, TEAM, home_for, setpriv

from imagekit.cli import main
from imagekit.export import artifacts as art
from imagekit.export.store import Store
from imagekit.registry import RegistryClient, parse
from helpers.needs import need

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def _need_enroot() -> None:
    need(None if shutil.which("enroot") else "enroot is not installed (bash scripts/setup-cluster.sh)")


@pytest.fixture
def odd_in(odd_image, registry, tmp_path, monkeypatch):
    """``odd_in(repo)``: the odd image (real files, 117 MB) pushed to ``repo`` with `docker push` (Enroot
    reads Docker's manifests from Debian's registry): (uri, client, subject). A repository per test
    keeps each test's referrers its own."""
    from imagekit.export.push import push_image

    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot-config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))

    def push(repo: str):
        push_image(odd_image, f"{registry}/{repo}:1")
        client = RegistryClient(registry)
        return f"docker://{registry}#{repo}:1", client, client.resolve(parse(f"{registry}#{repo}:1"))
    return push


def push_file(client, repo: str, subject, content: bytes, preset: str, tmp_path: Path, **over) -> str:
    """An enroot artifact of ``content`` for ``subject``, as anyone who may push to ``repo`` can make."""
    path = tmp_path / f"artifact-{len(list(tmp_path.glob('artifact-*')))}.sqsh"
    path.write_bytes(content)
    if over:
        subject = dataclasses.replace(subject, **over)
    return art.push_artifact(client, repo, subject, art.ExportedFile("enroot", path, preset, "sqfstar")).digest


def enroot_squashfs(tmp_path: Path) -> bytes:
    """A real, small squashfs (what a trusted CI would push), made with mksquashfs."""
    src = tmp_path / "sqsh-src"
    src.mkdir()
    (src / "hello").write_text("from CI\n")
    out = tmp_path / "real.sqsh"
    import subprocess

    subprocess.run(["mksquashfs", str(src), str(out), "-noappend", "-quiet"], check=True, capture_output=True)
    return out.read_bytes()


def served(call) -> bytes:
    assert call.rc == 0, call.log
    return Path(call.path).read_bytes()


# --- F3: artifacts come from trusted repositories only, checked, under a key of their own ---------------

def test_f3_an_untrusted_repositorys_referrer_never_decides_the_root_filesystem(odd_in, tmp_path):
    _need_enroot()
    uri, client, subject = odd_in("open/app")
    push_file(client, "open/app", subject, b"hsqs-NOT-THE-IMAGE: attacker-chosen bytes", "fast", tmp_path)
    call = pyxis_get(uri, job_env(tmp_path / "store", tmp_path / "run", 0, **NO_ENGINE))
    assert b"NOT-THE-IMAGE" not in served(call) and is_squashfs(call.path)
    assert "not in IMAGEKIT_TRUSTED_ARTIFACTS" in call.log and "converting with" in call.log


def test_f3_a_trusted_referrer_must_be_a_squashfs_of_this_image(odd_in, tmp_path, registry):
    """Even from a trusted repository: the wrong image's export, and bytes that are no squashfs, are
    skipped with a warning each, and the image is converted instead."""
    _need_enroot()
    uri, client, subject = odd_in("ci/app")
    push_file(client, "ci/app", subject, enroot_squashfs(tmp_path), "fast", tmp_path,
              config_digest="sha256:" + "0" * 64)
    push_file(client, "ci/app", subject, b"hsqs-NOT-THE-IMAGE" * 10, "shared-fs", tmp_path)
    env = job_env(tmp_path / "store", tmp_path / "run", 0, IMAGEKIT_TRUSTED_ARTIFACTS=f"{registry}/ci/*",
                  **NO_ENGINE)
    call = pyxis_get(uri, env)
    assert b"NOT-THE-IMAGE" not in served(call) and b"from CI" not in served(call)
    assert f"it names image 'sha256:{'0' * 64}', not {subject.config_digest}" in call.log, call.log
    assert "squashfs version 17736.18733; Enroot, squashfuse and Apptainer mount 4.0" in call.log, call.log  # b"hsqs-N"...
    assert "converted and stored" in call.log
    assert [e.options for e in Store.open(tmp_path / "store").entries()] == [()]


def test_f3_a_pulled_artifact_is_kept_apart_from_the_local_exports_key(odd_image, registry, tmp_path):
    """A good artifact from a trusted repository is served to jobs, under its own key: a later local
    `imagekit export` of the same image converts, and never answers with the registry's bytes."""
    from imagekit.export import ExportRequest, export_image
    from imagekit.export.artifacts import ArtifactPlan, push_with_artifacts

    push_with_artifacts(odd_image, f"{registry}/imagekit-test/trusted:1",
                        ArtifactPlan.of(["enroot"], {"enroot": "fast"}, workdir=tmp_path))
    store = tmp_path / "store"
    call = pyxis_get(f"docker://{registry}#imagekit-test/trusted:1",
                     job_env(store, tmp_path / "run", 0, IMAGEKIT_TRUSTED_ARTIFACTS=f"{registry}/imagekit-test/*"))
    assert call.rc == 0 and "pulling the pushed enroot artifact" in call.log, call.log
    (entry,) = Store.open(store).entries()
    assert entry.options == ("source=artifact",) and entry.extra["repository"] == "imagekit-test/trusted"
    local = export_image(odd_image, ExportRequest("enroot"), tmp_path / "local.sqsh", store=store)
    assert not local.store_hit and local.store_entry != call.path
    again = pyxis_get(f"docker://{registry}#imagekit-test/trusted:1", job_env(store, tmp_path / "run", 1))
    assert again.rc == 0 and "store hit" in again.log and "pulling" not in again.log


# --- F20: one bad referrer is skipped ---------------------------------------------------------------------

def test_f20_a_referrer_with_a_bad_preset_is_skipped_not_fatal(odd_in, tmp_path, registry):
    _need_enroot()
    uri, client, subject = odd_in("ci/badpreset")
    push_file(client, "ci/badpreset", subject, b"x" * 100, "../../../x", tmp_path)
    call = pyxis_get(uri, job_env(tmp_path / "store", tmp_path / "run", 0,
                                  IMAGEKIT_TRUSTED_ARTIFACTS=f"{registry}/ci/*", **NO_ENGINE))
    assert call.rc == 0, call.log
    assert "its preset annotation '../../../x' is not a preset name" in call.log
    assert "Traceback" not in call.log and is_squashfs(call.path)


# --- F5: a --squash-opt variant is never served ---------------------------------------------------------

def test_f5_the_importer_never_serves_a_squash_opt_variant(odd_in, tmp_path):
    _need_enroot()
    uri, _, subject = odd_in("any/slim")
    st = Store.open(tmp_path / "store")
    slim, _ = st.get_or_create(st.key(subject.config_digest, "enroot", "fast", ("squash-opt=-e", "squash-opt=usr")),
                               lambda p: p.write_bytes(b"SLIM VARIANT: /usr excluded"))
    call = pyxis_get(uri, job_env(tmp_path / "store", tmp_path / "run", 0, **NO_ENGINE))
    assert call.path != str(slim.path) and served(call) != b"SLIM VARIANT: /usr excluded"
    assert is_squashfs(call.path) and "converted and stored" in call.log


# --- F4: no engine, no artifact: one conversion straight from the registry ---------------------------------

def test_f4_without_engine_or_artifact_the_registry_path_converts_once(pushed_odd, tmp_path):
    """Two job steps at once on a node with no Docker engine: the image is converted once, straight
    from the registry, under the store's lock; both get the same file, and a later step is a verified hit."""
    uri, _ = pushed_odd
    store = tmp_path / "store"
    envs = [job_env(store, tmp_path / "run", step, **NO_ENGINE) for step in range(2)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        calls = list(pool.map(lambda e: pyxis_get(uri, e), envs))
    assert [c.rc for c in calls] == [0, 0], [c.log for c in calls]
    logs = "".join(c.log for c in calls)
    assert logs.count("converting with") == 1 and logs.count("converted and stored") == 1, logs
    assert len({c.path for c in calls}) == 1 and is_squashfs(calls[0].path)
    listing = __import__("subprocess").run(["unsquashfs", "-l", calls[0].path], capture_output=True, text=True)
    assert "squashfs-root/opt/data/file.txt" in listing.stdout
    assert "straight from the registry" in logs
    (entry,) = Store.open(store).entries()
    assert entry.options == ()
    hit = pyxis_get(uri, job_env(store, tmp_path / "run", 2, **NO_ENGINE))
    assert hit.rc == 0 and hit.path == calls[0].path and "store hit" in hit.log and "verified" in hit.log
    for env in (*envs, job_env(store, tmp_path / "run", 2)):
        assert pyxis_release(env).rc == 0
    assert list((store / "holds").iterdir()) == []


@pytest.fixture(scope="module")
def pushed_odd(odd_image, registry):
    """The odd image (117 MB, real files) in the registry: (docker://… URI, image ID)."""
    from imagekit.engines import docker as engine
    from imagekit.export.push import push_image

    push_image(odd_image, f"{registry}/imagekit-test/odd:1")
    return f"docker://{registry}#imagekit-test/odd:1", engine.inspect(odd_image).id


# --- F2/F6 end to end: two users and the site's shared store ---------------------------------------------

def test_two_users_read_the_sites_store_and_convert_only_into_their_own(pushed_odd, base_image, registry,
                                                                       other_python, shared_dir, tmp_path):
    """Root publishes (the CI of the site's store, group TEAM); Alice and Bob, outside TEAM, run jobs: a
    verified hit from the shared store for the published image, their own store for anything else. Alice
    pointing her job at the shared store as her own cannot publish there."""
    _need_enroot()
    uri, image_id = pushed_odd
    py = other_python
    shared = shared_dir / "shared"
    assert CliRunner().invoke(main, ["store", "--store", str(shared), "init", "--shared", "--group",
                                     str(TEAM)]).exit_code == 0
    published = pyxis_get(uri, job_env(shared, tmp_path / "run", 0))     # CI (root) publishes
    assert published.rc == 0 and str(shared) in published.path, published.log
    importer = [str(py.python), "-m", "imagekit.export.pyxis_importer"]

    def job(uid: int, step: int, target: str, home: str | None = None, **extra: str):
        env = py.env(HOME=home or str(home_for(uid, shared_dir)), IMAGEKIT_SHARED_STORE=str(shared),
                     SLURM_JOB_ID="77", SLURM_STEP_ID=str(step), SLURM_JOB_UID=str(uid), **NO_ENGINE, **extra)
        return env, pyxis_get(target, env, setpriv(uid, importer))

    for uid in (ALICE, BOB):
        env, call = job(uid, 0, uri)
        assert call.rc == 0 and call.path == published.path, call.log
        assert "store hit" in call.log and "verified" in call.log and "convert" not in call.log
        holds = [p for p in (shared / "holds").iterdir() if p.stat().st_uid == uid]
        assert len(holds) == 1
        assert pyxis_release(env, setpriv(uid, importer)).rc == 0
        assert pyxis_release(env, setpriv(uid, importer)).rc == 0
        assert not any(p.stat().st_uid == uid for p in (shared / "holds").iterdir())

    # A node where Bob's home is not writable (no store of his own): the shared store still serves him.
    _, readonly_home = job(BOB, 9, uri, home="/")
    assert readonly_home.rc == 0 and readonly_home.path == published.path, readonly_home.log

    # An image the site has not published: Alice converts into her own store; Bob never gets hers.
    from imagekit.export.push import push_image

    push_image(base_image, f"{registry}/imagekit-test/base:1")
    other = f"docker://{registry}#imagekit-test/base:1"
    _, alice = job(ALICE, 1, other)
    assert alice.rc == 0 and str(shared_dir / f"home-{ALICE}") in alice.path, alice.log
    assert str(shared) not in alice.path
    _, bob = job(BOB, 1, other)
    assert bob.rc == 0 and str(shared_dir / f"home-{BOB}") in bob.path and bob.path != alice.path, bob.log

    # Alice naming the shared store as her own: refused in one line, nothing written there.
    before = sorted(p.name for p in (shared / "entries" / "sha256").iterdir())
    _, planted = job(ALICE, 2, other, IMAGEKIT_STORE=str(shared))
    assert planted.rc == 1 and "may read the export store" in planted.log and "Traceback" not in planted.log
    assert sorted(p.name for p in (shared / "entries" / "sha256").iterdir()) == before


def test_a_misconfigured_shared_store_is_skipped_with_a_warning(odd_in, tmp_path, shared_dir):
    """The README's old layout (group-writable by every job user) is not trusted: the job runs from
    the user's own store, and the log says why."""
    _need_enroot()
    uri, _, _ = odd_in("any/legacy")
    legacy = shared_dir / "legacy"
    legacy.mkdir()
    os.chown(legacy, 0, TEAM)
    os.chmod(legacy, 0o2775)
    call = pyxis_get(uri, job_env(tmp_path / "own", tmp_path / "run", 0, IMAGEKIT_SHARED_STORE=str(legacy),
                                  **NO_ENGINE))
    assert call.rc == 0 and str(tmp_path / "own") in call.path, call.log
    assert "not using the shared store" in call.log and "writable by group" in call.log
    assert json.dumps(os.listdir(legacy)) == "[]"
