"""The Apptainer runtime layout (``/.singularity.d``) for an image converted from Docker.

Facts from Apptainer's OCI conversion (internal/pkg/build/sources): the same
directories, file names, modes and symlinks; ``env/10-docker2singularity.sh``
exports every image ``Env`` entry as a default (``PATH`` forced); the
runscript carries ``OCI_ENTRYPOINT``/``OCI_CMD`` and runs them with Docker's
rule (arguments replace CMD, ENTRYPOINT stays); ``labels.json`` holds the image
labels (tab-indented JSON); ``/etc/hosts`` and ``/etc/resolv.conf`` are empty
files the runtime binds over. The scripts are imagekit's own wording with the
same behaviour. One deliberate difference: values in the env script are
single-quoted once, so values with quotes, ``$``, backslashes or newlines
arrive intact (Apptainer escapes them twice for double quotes). Image
metadata is someone else's text: every value goes through
:mod:`imagekit.quoting`, and a variable name that a shell cannot export is
refused with the image and the field named.
"""

from __future__ import annotations

import json
from typing import Any

from imagekit import quoting
from imagekit.export.tarstream import Member, dir_entry, file_entry, symlink_entry

ENV_LOOP = ('for env_script in /.singularity.d/env/*.sh; do\n'
            '    [ -f "$env_script" ] && . "$env_script"\n'
            'done\n')

ACTIONS = {
    "exec": "#!/bin/sh\n# Apptainer action: exec COMMAND in the image environment.\n\n"
            + ENV_LOOP + '\nexec "$@"\n',
    "run": "#!/bin/sh\n# Apptainer action: run the image's runscript (or an app's with --app).\n\n"
           + ENV_LOOP +
           '\nif [ -n "${APPTAINER_APPNAME:-}" ]; then\n'
           '    for app_run in "/scif/apps/${APPTAINER_APPNAME}/scif/runscript" '
           '/scif/apps/singularity/scif/runscript; do\n'
           '        [ -x "$app_run" ] && exec "$app_run" "$@"\n'
           '    done\n'
           '    echo "No Apptainer runscript for contained app: ${APPTAINER_APPNAME}"\n'
           '    exit 1\n'
           'fi\n'
           'if [ -x /.singularity.d/runscript ]; then\n'
           '    exec /.singularity.d/runscript "$@"\n'
           'fi\n'
           'echo "No Apptainer runscript found, executing /bin/sh"\n'
           'exec /bin/sh "$@"\n',
    "shell": "#!/bin/sh\n# Apptainer action: interactive shell in the image environment.\n\n"
             + ENV_LOOP +
             '\nif [ -n "${APPTAINER_SHELL:-}" ] && [ -x "$APPTAINER_SHELL" ]; then\n'
             '    exec $APPTAINER_SHELL "$@"\n'
             'fi\n'
             'if [ -x /bin/bash ]; then\n'
             '    SHELL=/bin/bash\n'
             '    PS1="Apptainer ${APPTAINER_NAME:-}:\\\\w> "\n'
             '    export SHELL PS1\n'
             '    exec /bin/bash --norc "$@"\n'
             'fi\n'
             'SHELL=/bin/sh\n'
             'export SHELL\n'
             'exec /bin/sh "$@"\n',
    "start": "#!/bin/sh\n# Apptainer action: start an instance (tell PID 1 to go on first).\n\n"
             "kill -CONT 1\n\n" + ENV_LOOP +
             '\n[ -x /.singularity.d/startscript ] && exec /.singularity.d/startscript\n'
             'exit 0\n',
    "test": "#!/bin/sh\n# Apptainer action: run the image's test script.\n\n"
            + ENV_LOOP +
            '\nif [ -n "${APPTAINER_APPNAME:-}" ]; then\n'
            '    for app_test in "/scif/apps/${APPTAINER_APPNAME}/scif/test" '
            '/scif/apps/singularity/scif/test; do\n'
            '        [ -x "$app_test" ] && exec "$app_test" "$@"\n'
            '    done\n'
            '    echo "No tests for contained app: ${APPTAINER_APPNAME}"\n'
            '    exit 1\n'
            'fi\n'
            '[ -x /.singularity.d/test ] && exec /.singularity.d/test "$@"\n'
            'exec /bin/sh -c true\n',
}

ENV_SCRIPTS = {
    "01-base.sh": "#!/bin/sh\n# Base environment (intentionally empty).\n",
    "90-environment.sh": "#!/bin/sh\n# Custom environment shell code should follow\n\n",
    "95-apps.sh": "#!/bin/sh\n# SCIF apps: put the active app's bin and lib first.\n\n"
                  'if [ -n "${APPTAINER_APPNAME:-}" ]; then\n'
                  '    export APPTAINER_APPNAME\n'
                  '    app_dir="/scif/apps/${APPTAINER_APPNAME}"\n'
                  '    if [ ! -d "$app_dir/" ]; then\n'
                  '        echo "Could not locate the container application: ${APPTAINER_APPNAME}"\n'
                  '        exit 1\n'
                  '    fi\n'
                  '    SCIF_APPS=/scif/apps\n'
                  '    SCIF_APPROOT="$app_dir"\n'
                  '    export SCIF_APPROOT SCIF_APPS\n'
                  '    PATH="$app_dir:/scif/apps/singularity:$PATH"\n'
                  '    [ -d "$app_dir/bin" ] && PATH="$app_dir/bin:$PATH"\n'
                  '    if [ -d "$app_dir/lib" ]; then\n'
                  '        LD_LIBRARY_PATH="$app_dir/lib:${LD_LIBRARY_PATH:-}"\n'
                  '        export LD_LIBRARY_PATH\n'
                  '    fi\n'
                  '    for app_env in "$app_dir/scif/env/01-base.sh" "$app_dir/scif/env/90-environment.sh"; do\n'
                  '        [ -f "$app_env" ] && . "$app_env"\n'
                  '    done\n'
                  '    export PATH\n'
                  'fi\n',
    "99-base.sh": "#!/bin/sh\n# Libraries the runtime binds in (e.g. GPU drivers) come last.\n\n"
                  'if [ -z "${LD_LIBRARY_PATH:-}" ]; then\n'
                  '    LD_LIBRARY_PATH=/.singularity.d/libs\n'
                  'else\n'
                  '    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"\n'
                  'fi\n'
                  'PS1="Apptainer> "\n'
                  'export LD_LIBRARY_PATH PS1\n',
    "99-runtimevars.sh": "#!/bin/sh\n# PATH changes requested on the command line (--env PREPEND_PATH=...).\n\n"
                         '[ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ] && '
                         'PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"\n'
                         '[ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ] && '
                         'PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"\n'
                         '[ -n "${SING_USER_DEFINED_PATH:-}" ] && PATH="${SING_USER_DEFINED_PATH}"\n'
                         'unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH '
                         'SING_USER_DEFINED_PATH\n'
                         'export PATH\n',
}

BASE_DIRS = (".singularity.d", ".singularity.d/libs", ".singularity.d/actions", ".singularity.d/env",
             "dev", "proc", "root", "var", "var/tmp", "tmp", "etc", "sys", "home")
SYMLINKS = {
    "apptainer": ".singularity.d/runscript",
    ".run": ".singularity.d/actions/run",
    ".exec": ".singularity.d/actions/exec",
    ".test": ".singularity.d/actions/test",
    ".shell": ".singularity.d/actions/shell",
    "environment": ".singularity.d/env/90-environment.sh",
}


def check_config(config: dict[str, Any], image: str = "image") -> None:
    """Refuse what the scripts cannot carry: a variable name a shell cannot export, or a NUL."""
    where = f"image {image}"
    for i, entry in enumerate(config.get("Env") or []):
        name, _, value = entry.partition("=")
        quoting.env_name(name, where, f"Env[{i}] name")
        quoting.sh(value, where, f"Env[{i}] ({name}) value")
    for field in ("Entrypoint", "Cmd"):
        quoting.sh_words(list(config.get(field) or []), where, field)
    for key, value in (config.get("Labels") or {}).items():
        quoting.valid_text(key, where, "label name")
        quoting.valid_text(value, where, f"label {quoting.shown(key)}")


def env_script(config: dict[str, Any]) -> str:
    # Apptainer writes `export NAME="${NAME:-VALUE}"` and escapes VALUE twice for it; the same
    # default, set with a single-quoted VALUE, arrives intact in any POSIX shell.
    lines = ["#!/bin/sh\n"]
    for entry in config.get("Env") or []:
        name, sep, value = entry.partition("=")
        if not sep:
            lines.append(f'export {name}="${{{name}:-}}"\n')
        elif name == "PATH":
            lines.append(f"export PATH={quoting.sh(value)}\n")
        else:
            lines.append(f'[ -n "${{{name}:-}}" ] || {name}={quoting.sh(value)}\nexport {name}\n')
    return "".join(lines)


def runscript(config: dict[str, Any]) -> str:
    # Each word quoted, then the whole list quoted once more: the runscript evals the list back
    # into words, so both levels must be shell-quoted (Apptainer does the same).
    entrypoint = list(config.get("Entrypoint") or [])
    cmd = list(config.get("Cmd") or [])
    ep = quoting.sh(quoting.sh_words(entrypoint))
    cm = quoting.sh(quoting.sh_words(cmd))
    return ("#!/bin/sh\n"
            "# From the image's ENTRYPOINT and CMD: arguments replace CMD, ENTRYPOINT stays.\n"
            f"OCI_ENTRYPOINT={ep}\n"
            f"OCI_CMD={cm}\n"
            'if [ $# -eq 0 ]; then\n'
            '    eval "set -- $OCI_CMD"\n'
            'fi\n'
            'eval "set -- $OCI_ENTRYPOINT \\"\\$@\\""\n'
            'if [ $# -eq 0 ]; then\n'
            '    set -- /bin/sh\n'
            'fi\n'
            'exec "$@"\n')


def labels_json(config: dict[str, Any]) -> str:
    labels = config.get("Labels") or {}
    return json.dumps(labels, indent="\t", sort_keys=True, ensure_ascii=False) if labels else "null"


def files(config: dict[str, Any], image: str = "image") -> dict[str, tuple[str, int]]:
    """Files written (replacing the image's), by path: (content, mode)."""
    check_config(config, image)
    out: dict[str, tuple[str, int]] = {"etc/hosts": ("", 0o644), "etc/resolv.conf": ("", 0o644)}
    for name, text in ACTIONS.items():
        out[f".singularity.d/actions/{name}"] = (text, 0o755)
    for name, text in ENV_SCRIPTS.items():
        out[f".singularity.d/env/{name}"] = (text, 0o755)
    out[".singularity.d/env/10-docker2singularity.sh"] = (env_script(config), 0o755)
    out[".singularity.d/runscript"] = (runscript(config), 0o755)
    out[".singularity.d/startscript"] = ("#!/bin/sh\n", 0o755)
    out[".singularity.d/labels.json"] = (labels_json(config), 0o644)
    return out


def keep(member: Member, replaced: frozenset[str]) -> bool:
    name = member.name
    if name == ".dockerenv" or name.startswith("dev/"):
        return False
    return name not in replaced


def extra_entries(config: dict[str, Any], mtime: int, image: str = "image"):
    layout = files(config, image)

    def build(seen: set[str]):
        out = [dir_entry(d, mtime=mtime) for d in BASE_DIRS if d not in seen]
        out += [file_entry(p, quoting.encode(text), mode=mode, mtime=mtime) for p, (text, mode) in layout.items()]
        out += [symlink_entry(p, target, mtime=mtime) for p, target in SYMLINKS.items() if p not in seen]
        return out

    return build
