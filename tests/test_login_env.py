"""The login-environment profile script (imagekit.util.login_env) on every base's kind of /etc/profile.

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

import os
import re
import subprocess

import pytest

from imagekit import checks
from imagekit.util import login_env
from imagekit.engines import docker as engine
from imagekit.checks import runner

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
[ -n "$SCRIPT_AT" ] && printf '%s' "$SCRIPT" > "$SCRIPT_AT"
[ -n "$IMAGE_PROFILE_D" ] && printf '%s' "$IMAGE_PROFILE_D" > /etc/profile.d/50-sitetool.sh
[ -n "$USER_PROFILE" ] && printf '%s' "$USER_PROFILE" > /.profile
mkdir -p /opt/sitetool/bin && printf '#!/bin/sh\necho sitetool-ok\n' > /opt/sitetool/bin/sitetool
chmod 755 /opt/sitetool/bin/sitetool
shift
printf '%s\n' "$DECLARED" > /etc/environment
for shell in sh bash; do
  for uid in 0 65534; do
    if [ "$uid" = 0 ]; then run=""; else run="setpriv --reuid=$uid --regid=$uid --clear-groups"; fi
    got=$(env -i "$@" HOME=/ $run $shell -l -c "$SHOW")
    echo "$shell $uid $got"
  done
done
"""
SHOW = 'printf "%s|%s|%s|%s" "$PATH" "$PMIX_MCA_gds" "$UCX_TLS" "$SPACED"'
# A site tool that the image's own profile.d script puts on PATH (modules, conda, vendor tool chains).
SITETOOL = 'export PATH="/opt/sitetool/bin:$PATH"\nexport UCX_TLS="$UCX_TLS,cuda"\n'


def login_shells(base_image: str, profile: str, with_script: bool | str, declared: list[str] = DECLARED,
                 extra: list[str] = (), image_profile_d: str = "", user_profile: str = "",
                 show: str = SHOW) -> dict[str, str]:
    """``{"sh 0": "PATH|PMIX_MCA_gds|UCX_TLS|SPACED", ...}`` as each login shell sees them.

    ``with_script``: True puts the script where imagekit does (:data:`login_env.PATH`), a string
    puts it at that path instead. ``image_profile_d``: the image's own /etc/profile.d/50-sitetool.sh;
    ``user_profile``: the user's ~/.profile (HOME is / for both users)."""
    # /etc/environment holds the declared entries; the shell starts with them and then `extra` (the
    # runtime's additions and overrides, as enroot-switchroot's environment file has them).
    at = ("/" + login_env.PATH if with_script is True else with_script) if with_script else ""
    proc = subprocess.run(["/usr/bin/docker", "run", "--rm", "-e", f"UBUNTU_LIKE={UBUNTU_LIKE}",
                           "-e", f"RHEL_LIKE={RHEL_LIKE}", "-e", f"SCRIPT={login_env.script()}",
                           "-e", f"SCRIPT_AT={at}", "-e", f"IMAGE_PROFILE_D={image_profile_d}",
                           "-e", f"USER_PROFILE={user_profile}", "-e", f"SHOW={show}",
                           "-e", "DECLARED=" + "\n".join(declared),
                           base_image, "sh", "-c", RUN, "run", profile, *declared, *extra],
                          capture_output=True, text=True)
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
                           f'printf "%s" "$SCRIPT" > /{login_env.PATH}; '
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


@pytest.mark.parametrize("profile", ["debian", "ubuntu", "rhel"])
def test_the_images_profile_scripts_and_the_users_profile_change_the_declared_value(base_image, profile):
    """Issue 34, PXS3-1: what the image's own profile.d script and the user's ~/.profile do to a declared
    variable survives (as under `enroot import` of a base that does not reset PATH), and the tool
    the script puts on PATH is found, for root and a user, under sh and bash."""
    seen = login_shells(base_image, profile, with_script=True, image_profile_d=SITETOOL,
                        user_profile='export PMIX_MCA_gds="$PMIX_MCA_gds,user"\n',
                        show=SHOW + '; printf "|%s" "$(sitetool)"')
    assert len(seen) == 4
    want = "/opt/sitetool/bin:/opt/stack/bin:/usr/bin:/bin|hash,user|rc,sm,self,cuda|a  b|sitetool-ok"
    assert seen == {k: want for k in seen}


def test_at_the_last_place_the_script_undid_the_images_profile_scripts(base_image):
    """Why the script runs first: the same script last in /etc/profile.d (where imagekit put it
    before issue 34) gives back the value from before the image's own script, and the tool is lost."""
    last = login_shells(base_image, "ubuntu", with_script="/etc/profile.d/zz-imagekit-environment.sh",
                        image_profile_d=SITETOOL)
    assert last["sh 0"] == "/opt/stack/bin:/usr/bin:/bin|hash|rc,sm,self|a  b"


# A concrete name for each pattern of login_env.NEVER_RESTORED that a profile may set (the read-only
# UID, EUID and PPID are the test below).
NEVER = ["IFS", "PS1", "PS4", "ENV", "BASH_ENV", "BASH_XTRACEFD", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND",
         "CDPATH", "GLOBIGNORE", "EXECIGNORE", "SHLVL", "OPTIND", "OPTARG", "LINENO", "RANDOM", "SECONDS",
         "HISTCMD", "HISTFILE", "POSIXLY_CORRECT", "_imagekit_names"]


def unguarded() -> str:
    """The script without its list of names never given back: what imagekit shipped before G5."""
    text = re.sub(r"\n        # Never given back.*?esac\n", "\n", login_env.script(), flags=re.S)
    assert text != login_env.script() and "PS[0-9]" not in text
    return text


def test_names_a_shell_refuses_are_never_given_back(base_image):
    """G5 (security-3): a name the shell refuses from its environment, or reads as its own settings,
    keeps the value the shell has. The base's profile sets each one; the image declares another value,
    which the script without its list gives back. Every NEVER name matches login_env.NEVER_RESTORED."""
    assert all(login_env.never_restored(n) for n in NEVER + ["UID", "EUID", "PPID", "BASH_FUNC_f%%", "_"])
    assert not any(login_env.never_restored(n) for n in ("PATH", "LD_LIBRARY_PATH", "PS", "ENVIRONMENT",
                                                         "BASHFUL", "IMAGEKIT_X", "UCX_TLS"))
    # dash's login shell; the profile sets each name after the shell started (IFS and the counters the
    # shell keeps itself are shown, not set).
    names = [n for n in NEVER if n not in ("IFS", "LINENO", "RANDOM", "SECONDS", "HISTCMD", "OPTIND")]
    profile = "".join(f"{n}=from-profile; " for n in names) + '\nfor i in /etc/profile.d/*.sh; do . "$i"; done\n'
    show = "".join(f'printf "{n}:%s;" "${{{n}-}}"; ' for n in names) + 'printf "IFS=[%s]" "$IFS"'
    # dash refuses to start with a word in OPTIND: declared, it would stop every shell, script or not.
    declared = [f"{n}=from-image" for n in NEVER if n != "OPTIND"] + ["PATH=/usr/bin:/bin"]

    def run(script: str) -> str:
        proc = subprocess.run(["/usr/bin/docker", "run", "--rm", "-e", f"SCRIPT={script}", "-e", f"PROFILE={profile}",
                               "-e", f"SHOW={show}", base_image, "sh", "-c",
                               f'printf "%s" "$SCRIPT" > /{login_env.PATH}; printf "%s" "$PROFILE" > /etc/profile; '
                               'printf "%s\\n" "$@" > /etc/environment; env -i "$@" sh -l -c "$SHOW"',
                               "sh", *declared], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    seen = run(login_env.script())
    assert "from-image" not in seen and seen.endswith("IFS=[ \t\n]"), seen
    assert "PS4:from-image" in run(unguarded())


def test_the_images_ps4_does_not_run_in_roots_traced_login_shell(base_image):
    """G5's reproducer: ``ENV PS4='$(…)' SHELLOPTS=xtrace``. Bash ignores PS4 from the environment
    for root, so root's traced login shell (Debian's real /etc/profile) runs no command substitution,
    with the script or without it; the script without its list runs it."""
    declared = ["PATH=/usr/bin:/bin", "PS4=$(echo IMAGEKIT-PS4-$((6*7)) >&2)+ ", "SHELLOPTS=xtrace"]

    def run(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["/usr/bin/docker", "run", "--rm", "-e", f"SCRIPT={script}", base_image, "sh", "-c",
                               f'[ -z "$SCRIPT" ] || printf "%s" "$SCRIPT" > /{login_env.PATH}; '
                               'printf "%s\\n" "$@" > /etc/environment; env -i "$@" HOME=/root bash -l -c true',
                               "sh", *declared], capture_output=True, text=True)

    for script in ("", login_env.script()):
        proc = run(script)
        assert proc.returncode == 0 and "+ " in proc.stderr, proc.stderr      # traced: SHELLOPTS took
        assert "IMAGEKIT-PS4-42" not in proc.stderr, proc.stderr
    assert "IMAGEKIT-PS4-42" in run(unguarded()).stderr


@pytest.mark.parametrize("layout, ok", [("script-first", True), ("no-script", False), ("script-last", False)])
def test_the_login_env_check_passes_the_images_own_profile_scripts_and_catches_a_reset(base_image, tmp_path,
                                                                                      layout, ok):
    """The ``image.login_env`` check compares a login shell with what the image's own profile.d scripts
    make of the declared values: an image whose script puts a tool on PATH passes with imagekit's
    script first; it fails with no script (Debian's /etc/profile resets PATH) and with the script
    last (the image's own PATH change undone, as imagekit's images built before issue 34 did)."""
    at = {"script-first": "/" + login_env.PATH, "script-last": "/etc/profile.d/zz-imagekit-environment.sh",
          "no-script": None}[layout]
    (tmp_path / "sitetool.sh").write_text(SITETOOL.replace("\\n", "\n"))
    (tmp_path / "login.sh").write_text(login_env.script())
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\nENV PATH=/opt/app/bin:/usr/bin:/bin UCX_TLS=rc\n"
        "COPY sitetool.sh /etc/profile.d/50-sitetool.sh\n" + (f"COPY login.sh {at}\n" if at else ""))
    tag = f"imagekit-test/login-env-check:{layout}"
    proc = subprocess.run([engine.docker_cli(), "build", "-q", "-t", tag, str(tmp_path)], capture_output=True,
                          text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert proc.returncode == 0, proc.stderr
    try:
        report = runner.run(tag, [checks.LOGIN_ENV])
        assert report.ok is ok, [(o.id, o.detail) for o in report.outcomes]
        if not ok:
            (failed,) = report.failed
            assert "PATH:" in failed.detail and "/opt/sitetool/bin:/opt/app/bin:/usr/bin:/bin" in failed.detail, \
                failed.detail
    finally:
        subprocess.run([engine.docker_cli(), "rmi", "-f", tag], capture_output=True)
