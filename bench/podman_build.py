#!/usr/bin/env python3
"""Rootless Podman vs Docker BuildKit: the same stack (debian-mpi by default), cold and no-change rebuild.

Docker builds through the library as root (the engine's BuildKit); Podman builds as an
unprivileged user (``imagekit build --engine podman`` run by that user, its own store and
storage driver, see scripts/setup-podman.sh). Prints each time and the podman/docker ratios.

"Cold" is ``--no-cache``: every layer is built again, while both engines keep their apt/pip
cache mounts (the downloads), so the numbers compare the engines, not the mirror. ``--prune``
makes it colder: BuildKit's cache pruned and the user's Podman store reset (do not use it on
a machine whose engine others are using).

    python bench/podman_build.py                       # as root; user imagekit-user
    python bench/podman_build.py --user alice --venv build/venv-distro
    python bench/podman_build.py --also-vfs            # and once more on a scratch vfs store
    python bench/podman_build.py --stack debian-cuda --mirror ../shared/mirror --podman-only

--podman-only builds with Podman alone (cold from the user's store as it is, then the no-change
rebuild): the way to show a long CUDA stack builds rootless without paying for its Docker cold
build again. $IMAGEKIT_SITE (a site pins file) is passed on to the user's imagekit.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagekit import base_image, build, stack  # noqa: E402
from imagekit.engines import docker as engine  # noqa: E402


def as_user(user: str, argv: list[str], cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(user)
    extra = [f"{k}={v}" for k, v in (env or {}).items()]
    return subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={entry.pw_dir}",
                           f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}", *extra, *argv],
                          cwd=cwd, capture_output=True, text=True)


def podman_build(user: str, imagekit: str, work: str, no_cache: bool, env: dict[str, str] | None = None,
                 stack_name: str = "debian-mpi", mirror: str | None = None) -> tuple[float, dict]:
    argv = [imagekit, "build", "--engine", "podman", stack_name, "--json", "--log-dir", f"{work}/logs"] + \
        (["--mirror", mirror] if mirror else [])
    if os.environ.get("IMAGEKIT_SITE"):
        env = {**(env or {}), "IMAGEKIT_SITE": os.environ["IMAGEKIT_SITE"]}
    with record.timer() as t:
        proc = as_user(user, argv + (["--no-cache"] if no_cache else []), cwd=work, env=env)
    if proc.returncode != 0:
        sys.exit(f"podman build as {user} failed:\n{proc.stderr[-3000:]}")
    return t.wall, json.loads(proc.stdout)[0]["build"]


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--user", default=os.environ.get("IMAGEKIT_TEST_USER", "imagekit-user"))
    parser.add_argument("--venv", default=str(ROOT / "build/venv-distro"),
                        help="a venv the user can run (its python must be readable by the user)")
    parser.add_argument("--stack", default="debian-mpi", help="the stack to build (default debian-mpi)")
    parser.add_argument("--mirror", help="the site mirror of upstream release files (the CUDA stacks need one)")
    parser.add_argument("--podman-only", action="store_true",
                        help="build with Podman only (no --no-cache, no Docker builds): cold as the store is")
    parser.add_argument("--prune", action="store_true", help="prune BuildKit's cache and reset the user's store")
    parser.add_argument("--also-vfs", action="store_true",
                        help="also build on a scratch vfs store (CONTAINERS_STORAGE_CONF), removed afterwards")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it builds with Docker and runs Podman as --user")
    run = record.start(f"podman_build-{args.stack}", args)
    imagekit = str(Path(args.venv) / "bin" / "imagekit")
    s = stack.load(args.stack, mirror=args.mirror)
    # The offline stacks' bases are imagekit's own (imagekit/debian:SUITE), made here when missing.
    tag = base_image.ensure(base_image.BaseRequest(s.base.image.removeprefix("imagekit/")), log=lambda *_: None)
    logs = Path(tempfile.mkdtemp(prefix="imagekit-bench-"))
    work = tempfile.mkdtemp(prefix="imagekit-bench-podman-")
    os.chown(work, pwd.getpwnam(args.user).pw_uid, -1)
    if args.prune:
        subprocess.run([engine.docker_cli(), "builder", "prune", "-af"], capture_output=True, check=True)
        as_user(args.user, ["podman", "system", "reset", "--force"], cwd=work)
    entry = pwd.getpwnam(args.user)

    def load_base(env: dict[str, str] | None = None) -> None:
        """The user's store gets the same base image (same ID) as the engine's."""
        save = subprocess.Popen([engine.docker_cli(), "save", tag], stdout=subprocess.PIPE)
        subprocess.run(["runuser", "-u", args.user, "--", "env", f"HOME={entry.pw_dir}",
                        f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}",
                        *[f"{k}={v}" for k, v in (env or {}).items()], "podman", "load", "-q"],
                       stdin=save.stdout, check=True, capture_output=True)
        save.wait()

    load_base()

    rows = []
    build_as_user = dict(stack_name=args.stack, mirror=args.mirror)
    if args.podman_only:
        cold_p_s, cold_p = podman_build(args.user, imagekit, work, no_cache=False, **build_as_user)
        again_p_s, again_p = podman_build(args.user, imagekit, work, no_cache=False, **build_as_user)
        print(f"{args.stack} runtime, rootless Podman as {args.user}, {os.cpu_count()} cores")
        print(f"first build {cold_p['seconds']:.1f} s ({cold_p['cached_steps']}/{cold_p['steps']} steps cached), "
              f"no-change rebuild {again_p['seconds']:.1f} s ({again_p['cached_steps']}/{again_p['steps']} cached), "
              f"image {again_p['size_bytes'] / 1e6:.0f} MB")
        shutil.rmtree(logs, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        run.finish({"stack": args.stack, "user": args.user, "podman_only": True,
                    "first": {**cold_p, "with_cli_s": round(cold_p_s, 2)},
                    "no_change": {**again_p, "with_cli_s": round(again_p_s, 2)}})
        return
    cold_d = build.build(s, build.BuildRequest(no_cache=True, log_dir=logs))
    again_d = build.build(s, build.BuildRequest(log_dir=logs))
    cold_p_s, cold_p = podman_build(args.user, imagekit, work, no_cache=True, **build_as_user)
    again_p_s, again_p = podman_build(args.user, imagekit, work, no_cache=False, **build_as_user)
    driver = as_user(args.user, ["podman", "info", "--format", "{{.Store.GraphDriverName}}"], cwd=work).stdout.strip()
    rows.append(("cold (--no-cache)", cold_d.seconds, cold_p["seconds"], cold_p_s))
    rows.append(("no-change rebuild", again_d.seconds, again_p["seconds"], again_p_s))
    if args.also_vfs:
        # A scratch store of its own: another HOME (its storage.conf says vfs) and runtime directory.
        # (Rootless Podman ignores CONTAINERS_STORAGE_CONF's graphroot where the user has a storage.conf.)
        scratch = Path(work) / "vfs"
        (scratch / "home/.config/containers").mkdir(parents=True)
        (scratch / "run").mkdir(mode=0o700)
        (scratch / "home/.config/containers/storage.conf").write_text('[storage]\ndriver = "vfs"\n')
        subprocess.run(["chown", "-R", args.user, str(scratch)], check=True)
        vfs_env = {"HOME": str(scratch / "home"), "XDG_RUNTIME_DIR": str(scratch / "run")}
        load_base(vfs_env)
        cold_v_s, cold_v = podman_build(args.user, imagekit, work, no_cache=True, env=vfs_env, **build_as_user)
        again_v_s, again_v = podman_build(args.user, imagekit, work, no_cache=False, env=vfs_env, **build_as_user)
        vfs_driver = as_user(args.user, ["podman", "info", "--format", "{{.Store.GraphDriverName}}"], cwd=work,
                             env=vfs_env).stdout.strip()
        assert vfs_driver == "vfs", vfs_driver
        du = subprocess.run(["du", "-sb", str(scratch / "home")], capture_output=True, text=True).stdout.split()[0]
        as_user(args.user, ["podman", "system", "reset", "--force"], cwd=work, env=vfs_env)
        pause = scratch / "run/libpod/tmp/pause.pid"
        if pause.is_file():      # the scratch store's own user-namespace holder, started above
            subprocess.run(["kill", pause.read_text().strip()], capture_output=True)
        rows.append(("cold, vfs store", cold_d.seconds, cold_v["seconds"], cold_v_s))
        rows.append(("no-change, vfs store", again_d.seconds, again_v["seconds"], again_v_s))
    # --no-cache leaves the previous builds' layers untagged: drop them from the user's store.
    as_user(args.user, ["podman", "image", "prune", "-f"], cwd=work)
    print(f"{args.stack} runtime, Docker {engine.client().version()['Version']} BuildKit (root) vs "
          f"rootless Podman as {args.user} (storage driver {driver}), {os.cpu_count()} cores")
    print(f"{'measurement':<22} {'docker s':>9} {'podman s':>9} {'ratio':>6}  podman incl. CLI start")
    for name, d, p, p_all in rows:
        print(f"{name:<22} {d:>9.1f} {p:>9.1f} {p / d:>6.1f}  {p_all:.1f} s")
    print(f"cached steps: docker {again_d.cached_steps}/{again_d.steps}, "
          f"podman {again_p['cached_steps']}/{again_p['steps']}")
    print(f"image size: docker {again_d.size_bytes / 1e6:.0f} MB, podman {again_p['size_bytes'] / 1e6:.0f} MB")
    shutil.rmtree(logs, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    if args.also_vfs:
        print(f"vfs store after one build (base, cache layers, image): {int(du) / 1e9:.1f} GB")
    run.finish({"stack": args.stack, "user": args.user, "storage_driver": driver,
                "docker_version": engine.client().version()["Version"],
                "rows": [{"measurement": name, "docker_s": d, "podman_s": p, "podman_with_cli_s": round(p_all, 2)}
                         for name, d, p, p_all in rows],
                "cached_steps": {"docker": [again_d.cached_steps, again_d.steps],
                                 "podman": [again_p["cached_steps"], again_p["steps"]]},
                "image_bytes": {"docker": again_d.size_bytes, "podman": again_p["size_bytes"]},
                "vfs_store_bytes": int(du) if args.also_vfs else None})


if __name__ == "__main__":
    main()
