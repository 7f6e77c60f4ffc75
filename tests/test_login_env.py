"""The login-environment profile script (imagekit.login_env) on every base's kind of /etc/profile.

Enroot and Pyxis start commands through a login shell, which runs the base's /etc/profile. The
tests run the script the way ``enroot-switchroot`` starts a shell: only the environment file's
variables, then ``sh -l``/``bash -l``, as root and as an unprivileged user.

Debian's /etc/profile is the real one (the bootstrapped base image). Ubuntu and RHEL-family images
cannot be pulled here (no registry, no Ubuntu archive), so their /etc/profile is stood in for by a
few lines that do what theirs are documented to do, and no more: Ubuntu's (base-files) sets no
PATH and sources the readable /etc/profile.d/*.sh; RHEL's (the ``setup`` package) adds
/usr/local/sbin, /usr/sbin and /sbin to PATH through ``pathmunge`` (before the rest for root, after
it for users), then sources /etc/profile.d/*.sh with their output discarded.
"""

from __future__ import annotations

import subprocess

import pytest

from imagekit import login_env

pytestmark = pytest.mark.engine

UBUNTU_LIKE = """\
for i in /etc/profile.d/*.sh; do
  if [ -r "$i" ]; then . "$i"; fi
done
"""
RHEL_LIKE = """\
pathmunge() {
  case ":$PATH:" in *":$1:"*) ;; *) if [ "$2" = after ]; then PATH=$PATH:$1; else PATH=$1:$PATH; fi ;; esac
}
if [ "$(id -u)" = 0 ]; then pathmunge /sbin; pathmunge /usr/sbin; pathmunge /usr/local/sbin
else pathmunge /usr/local/sbin after; pathmunge /usr/sbin after; pathmunge /sbin after; fi
export PATH
for i in /etc/profile.d/*.sh; do
  if [ -r "$i" ]; then . "$i" >/dev/null 2>&1; fi
done
"""
# An image's declared environment, as Enroot writes it to /etc/environment (one NAME=VALUE a line).
DECLARED = ["PATH=/opt/stack/bin:/usr/bin:/bin", "PMIX_MCA_gds=hash", "UCX_TLS=rc,sm,self", "SPACED=a  b"]

RUN = r"""
set -eu
case "$1" in
  debian) ;;
  ubuntu) printf '%s' "$UBUNTU_LIKE" > /etc/profile ;;
  rhel) printf '%s' "$RHEL_LIKE" > /etc/profile ;;
esac
[ "$2" = with ] && printf '%s' "$SCRIPT" > /etc/profile.d/zz-imagekit-environment.sh
shift 2
printf '%s\n' "$DECLARED" > /etc/environment
for shell in sh bash; do
  for uid in 0 65534; do
    if [ "$uid" = 0 ]; then run=""; else run="setpriv --reuid=$uid --regid=$uid --clear-groups"; fi
    got=$(env -i "$@" HOME=/ $run $shell -l -c 'printf "%s|%s|%s|%s" "$PATH" "$PMIX_MCA_gds" "$UCX_TLS" "$SPACED"')
    echo "$shell $uid $got"
  done
done
"""


def login_shells(base_image: str, profile: str, with_script: bool, declared: list[str] = DECLARED,
                 extra: list[str] = ()) -> dict[str, str]:
    """``{"sh 0": "PATH|PMIX_MCA_gds|UCX_TLS|SPACED", ...}`` as each login shell sees them."""
    # /etc/environment holds the declared entries; the shell starts with them and then `extra` (the
    # runtime's additions and overrides, as enroot-switchroot's environment file has them).
    proc = subprocess.run(["/usr/bin/docker", "run", "--rm", "-e", f"UBUNTU_LIKE={UBUNTU_LIKE}",
                           "-e", f"RHEL_LIKE={RHEL_LIKE}", "-e", f"SCRIPT={login_env.script()}",
                           "-e", "DECLARED=" + "\n".join(declared),
                           base_image, "sh", "-c", RUN, "run", profile, "with" if with_script else "without",
                           *declared, *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    seen = {}
    for line in proc.stdout.splitlines():
        shell, uid, values = line.split(" ", 2)
        seen[f"{shell} {uid}"] = values
    return seen


@pytest.mark.parametrize("profile", ["debian", "ubuntu", "rhel"])
def test_the_declared_environment_survives_every_bases_login_shell(base_image, profile):
    seen = login_shells(base_image, profile, with_script=True)
    assert len(seen) == 4
    want = "/opt/stack/bin:/usr/bin:/bin|hash|rc,sm,self|a  b"
    assert seen == {k: want for k in seen}


def test_without_the_script_debian_and_rhel_change_path(base_image):
    """What the stand-ins and Debian's real profile do without the script: the test above can fail."""
    debian = login_shells(base_image, "debian", with_script=False)
    assert debian["bash 0"].split("|")[0] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert debian["sh 65534"].split("|")[0] == "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
    rhel = login_shells(base_image, "rhel", with_script=False)
    assert rhel["sh 0"].split("|")[0] == "/usr/local/sbin:/usr/sbin:/sbin:/opt/stack/bin:/usr/bin:/bin"
    assert login_shells(base_image, "ubuntu", with_script=False)["sh 0"].startswith("/opt/stack/bin:")


def test_a_value_the_runtime_gave_over_the_images_wins(base_image):
    """enroot start --env NAME=VALUE or Pyxis --container-env: the shell starts with the user's value, not
    /etc/environment's, and keeps it; a variable /etc/environment does not name is left to the profile."""
    seen = login_shells(base_image, "debian", with_script=True,
                        extra=["PMIX_MCA_gds=from-user", "PATH=/user/bin:/usr/bin:/bin"])
    assert set(seen.values()) == {"/user/bin:/usr/bin:/bin|from-user|rc,sm,self|a  b"}
    undeclared = login_shells(base_image, "debian", with_script=True, declared=["UCX_TLS=tcp"],
                              extra=["PATH=/user/bin:/bin"])
    assert undeclared["bash 0"].split("|")[:3] == ["/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                                    "", "tcp"]


def test_odd_environment_entries_are_skipped_not_run(base_image, tmp_path):
    """A value with a newline, a name that is not a name, `export NAME=`, and command text: data only."""
    canary = "/tmp/imagekit-login-env-canary"
    declared = ["export PATH=/opt/stack/bin:/usr/bin:/bin", f"BAD NAME=$(touch {canary})", "1X=2",
                f"UCX_TLS=$(touch {canary})", "SPACED=x"]
    proc = subprocess.run(["/usr/bin/docker", "run", "--rm", "-e", f"SCRIPT={login_env.script()}", base_image,
                           "sh", "-c",
                           'printf "%s" "$SCRIPT" > /etc/profile.d/zz-imagekit-environment.sh; '
                           'printf "%s\\n" "$@" > /etc/environment; '
                           'env -i PATH=/opt/stack/bin:/usr/bin:/bin "UCX_TLS=$(printf "a\\nPATH=/evil")" '
                           '"PMIX_MCA_gds=x" bash -l -c \'printf "%s|%s" "$PATH" "$UCX_TLS"\'; '
                           f'test ! -e {canary} && echo " no canary"', "sh", *declared],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # The newline-carrying UCX_TLS is left as the shell has it (not split into a forged PATH).
    assert proc.stdout == "/opt/stack/bin:/usr/bin:/bin|a\nPATH=/evil no canary\n", proc.stdout


def test_the_script_is_posix_sh(shellcheck):
    shellcheck(login_env.script(), "sh")
