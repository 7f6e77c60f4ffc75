#!/usr/bin/env python3
"""`imagekit base debian:bookworm`: root debootstrap into Docker vs rootless mmdebstrap into Podman.

Three ways to the same base image, each timed from the command's start to its tagged image
(bootstrap from the mirror, import):

- root, debootstrap (``--bootstrap debootstrap``): an unpacked root filesystem, then ``tar | docker import``;
- root, mmdebstrap (root mode): its tarball streamed straight into ``docker import``;
- rootless, mmdebstrap (unshare mode) as ``--user``: streamed into ``podman import`` in that user's store.

Each run downloads its packages from the mirror again (no tool keeps them), so the mirror's speed
is part of every number; ``--rounds N`` alternates the order. Tags are the bench's own
(``imagekit-bench/base-*``) and removed afterwards: the engine's and the user's
``imagekit/debian:bookworm`` are left alone.

    python bench/base.py                               # as root; user imagekit-user
    python bench/base.py --user alice --venv build/venv-distro --rounds 3
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagekit import base_image  # noqa: E402
from imagekit.engines import docker as engine  # noqa: E402


def seconds_of(argv: list[str], user: str | None, cwd: str) -> float:
    if user:
        entry = pwd.getpwnam(user)
        argv = ["runuser", "-u", user, "--", "env", f"HOME={entry.pw_dir}",
                f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}", *argv]
    with record.timer() as t:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return t.wall


def main() -> None:
    parser = record.parser(__doc__)
    parser.add_argument("--user", default=os.environ.get("IMAGEKIT_TEST_USER", "imagekit-user"))
    parser.add_argument("--venv", default=str(ROOT / "build/venv-distro"),
                        help="a venv the user can run (its python must be readable by the user)")
    parser.add_argument("--mirror", help="Debian mirror (default: the host's apt mirror)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it bootstraps as root for Docker and runs the rootless one as --user")
    run = record.start("base", args)
    imagekit = str(Path(args.venv) / "bin" / "imagekit")
    mirror = base_image.parse("debian:bookworm", args.mirror).mirror
    work = tempfile.mkdtemp(prefix="imagekit-bench-base-")
    os.chown(work, pwd.getpwnam(args.user).pw_uid, -1)
    tag = f"imagekit-bench/base-{os.getpid()}"
    ways = {
        "root debootstrap -> docker": ([imagekit, "base", "debian:bookworm", "--bootstrap", "debootstrap"], None),
        "root mmdebstrap -> docker": ([imagekit, "base", "debian:bookworm", "--bootstrap", "mmdebstrap"], None),
        f"rootless mmdebstrap -> podman ({args.user})":
            ([imagekit, "base", "debian:bookworm", "--engine", "podman"], args.user),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    sizes: dict[str, int] = {}
    try:
        for round_ in range(args.rounds):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                argv, user = ways[name]
                ref = f"{tag}-{list(ways).index(name)}:bookworm"
                times[name].append(seconds_of([*argv, "--mirror", mirror, "--tag", ref, "--force"], user, work))
                if user:
                    out = subprocess.run(["runuser", "-u", user, "--", "env",
                                          f"HOME={pwd.getpwnam(user).pw_dir}",
                                          f"XDG_RUNTIME_DIR=/run/user/{pwd.getpwnam(user).pw_uid}",
                                          "podman", "image", "inspect", "--format", "{{.Size}}", ref],
                                         capture_output=True, text=True, cwd=work).stdout
                    sizes[name] = int(out.strip() or 0)
                else:
                    sizes[name] = json.loads(subprocess.run(
                        [engine.docker_cli(), "image", "inspect", "--format", "{{json .Size}}", ref],
                        capture_output=True, text=True).stdout)
    finally:
        for i, (_, user) in enumerate(ways.values()):
            ref = f"{tag}-{i}:bookworm"
            if user:
                entry = pwd.getpwnam(user)
                subprocess.run(["runuser", "-u", user, "--", "env", f"HOME={entry.pw_dir}",
                                f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}", "podman", "rmi", "-f", ref],
                               capture_output=True, cwd=work)
            else:
                subprocess.run([engine.docker_cli(), "rmi", "-f", ref], capture_output=True)
        os.rmdir(work)
    mm = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"imagekit base debian:bookworm (minbase), {mm}, {os.cpu_count()} cores, {args.rounds} round(s)")
    first = list(ways)[0]
    print(f"{'way':<44} {'seconds':>8} {'vs root debootstrap':>20} {'image MB':>9}")
    for name, values in times.items():
        mean = sum(values) / len(values)
        base = sum(times[first]) / len(times[first])
        print(f"{name:<44} {mean:>8.1f} {mean / base:>19.2f}x {sizes.get(name, 0) / 1e6:>9.0f}")
    run.finish({"mmdebstrap": mm, "rounds": args.rounds, "mirror": mirror,
                "ways": {name: {"seconds": values, "mean_s": round(sum(values) / len(values), 2),
                                "image_bytes": sizes.get(name, 0)} for name, values in times.items()}})


if __name__ == "__main__":
    main()
