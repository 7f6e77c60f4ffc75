"""The Apptainer runtime layout (``/.singularity.d``) for an image converted from Docker.

Facts from Apptainer 1.4's docker conversion and build (internal/pkg/build/sources
conveyorPacker_oci.go and base_environment.go, internal/pkg/build/metadata.go): the same
directories, file names, modes and symlinks (``/singularity`` → the runscript, ``/.run``,
``/.exec``, ``/.test``, ``/.shell``, ``/environment``); ``env/10-docker2singularity.sh``
exports every image ``Env`` entry as a default (``PATH`` forced); ``labels.json`` holds the
image labels plus the build labels Apptainer adds (tab-indented JSON);
``/.singularity.d/Singularity`` holds the definition; ``/etc/hosts`` and
``/etc/resolv.conf`` are empty files the runtime binds over. The scripts are imagekit's own
wording with the same behaviour. :func:`inspect_metadata` is the ``inspect-metadata.json``
object that Apptainer ≥ 1.4 stores in the SIF so that ``apptainer inspect`` needs no container.

Deliberate differences, each where Apptainer's output would be wrong:

- values in the env script are single-quoted once, so values with quotes, ``$``,
  backslashes or newlines arrive intact (Apptainer escapes them twice for double quotes, so
  ``$x`` expands and ``\\`` doubles), and a ``'`` is written ``'"'"'``, which Apptainer's own
  shell interpreter reads right (it reads ``'\\''`` as ``\\'``);
- the runscript sets its words with ``set --`` (Apptainer's ``set WORDS`` takes a first
  word starting with ``-`` as a shell option), and with no ENTRYPOINT, CMD or arguments it
  starts ``/bin/sh`` (Apptainer's prints the shell's variables and exits);
- no ``org.label-schema.usage.apptainer.version`` label: no Apptainer built the file, and
  ``build-date`` is in UTC (``SOURCE_DATE_EPOCH`` gives reproducible files).

From the root filesystem, as from Enroot's export: ``/dev/*`` and ``/.dockerenv``, and what Docker's
init layer makes in every container (:func:`imagekit.export.layers.made_by_docker`): Apptainer's own
build reads the image's layers, which have none of it, and mounts its own ``/dev``. An image's own
``/etc/hostname`` or ``/etc/mtab`` is hidden from ``docker export`` by that layer, so no source
gives it (tests/export/test_apptainer_differential.py lists these differences).

Image metadata is someone else's text: every value goes through :mod:`imagekit.util.quoting`,
and a variable name that a shell cannot export is refused with the image and the field named.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from typing import Any

from imagekit.util import quoting
from imagekit.export.layers import made_by_docker
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
    "singularity": ".singularity.d/runscript",
    ".run": ".singularity.d/actions/run",
    ".exec": ".singularity.d/actions/exec",
    ".test": ".singularity.d/actions/test",
    ".shell": ".singularity.d/actions/shell",
    "environment": ".singularity.d/env/90-environment.sh",
}


def check_config(config: dict[str, Any], image: str = "image") -> None:
    """Refuse what the scripts cannot carry: a variable name a shell cannot export, or a NUL."""
    where = f"image {image}"
    quoting.env_sizes(list(config.get("Env") or []), where)
    for i, entry in enumerate(config.get("Env") or []):
        name, _, value = entry.partition("=")
        quoting.env_name(name, where, f"Env[{i}] name")
        quoting.sh(value, where, f"Env[{i}] ({name}) value")
    for field in ("Entrypoint", "Cmd"):
        quoting.sh_words(list(config.get(field) or []), where, field)
    for key, value in (config.get("Labels") or {}).items():
        quoting.valid_text(key, where, "label name")
        quoting.valid_text(value, where, f"label {quoting.shown(key)}")


def env_word(value: str) -> str:
    """``value`` single-quoted, each ``'`` written ``'"'"'``. Apptainer 1.4 runs the env scripts with
    its own shell interpreter, which reads the usual ``'\''`` as a backslash and a quote (``it\'s``;
    found by tests/export/test_apptainer_differential.py); this form means the same to it and to
    every POSIX shell."""
    quoting.valid_text(value, "value", "Env")
    return "'" + value.replace("'", "'\"'\"'") + "'"


def env_script(config: dict[str, Any]) -> str:
    # Apptainer writes `export NAME="${NAME:-VALUE}"` and escapes VALUE twice for it (a `$x` in the
    # value expands, a `\` doubles); the same default, set with a single-quoted VALUE, arrives intact.
    lines = ["#!/bin/sh\n"]
    for entry in config.get("Env") or []:
        name, sep, value = entry.partition("=")
        if not sep:
            lines.append(f'export {name}="${{{name}:-}}"\n')
        elif name == "PATH":
            lines.append(f"export PATH={env_word(value)}\n")
        else:
            lines.append(f'[ -n "${{{name}:-}}" ] || {name}={env_word(value)}\nexport {name}\n')
    return "".join(lines)


def runscript(config: dict[str, Any]) -> str:
    """Apptainer's argument rule for images from Docker: arguments replace CMD, ENTRYPOINT stays.

    Like Apptainer's runscript, the arguments are evaluated by a shell (each inside double
    quotes, so ``"$HOME"`` expands) unless ``apptainer run --no-eval`` set
    ``SINGULARITY_NO_EVAL``; then they are passed as they are (Docker's behaviour). The image's
    own words are never evaluated: each is quoted, then the list is quoted once more, because
    the script evals the list back into words.
    """
    ep = quoting.sh(quoting.sh_words(list(config.get("Entrypoint") or [])))
    cm = quoting.sh(quoting.sh_words(list(config.get("Cmd") or [])))
    return ("#!/bin/sh\n"
            f"OCI_ENTRYPOINT={ep}\n"
            f"OCI_CMD={cm}\n"
            "# Arguments replace CMD; ENTRYPOINT stays (Apptainer's rule for images from Docker).\n"
            'if [ -n "${SINGULARITY_NO_EVAL:-}" ]; then\n'
            "    # apptainer run --no-eval: the arguments as they are\n"
            '    if [ $# -eq 0 ]; then\n'
            '        eval "set -- $OCI_CMD"\n'
            '    fi\n'
            '    eval "set -- $OCI_ENTRYPOINT \\"\\$@\\""\n'
            "else\n"
            "    # Apptainer's default: each argument is evaluated by the shell, inside double quotes\n"
            '    if [ $# -eq 0 ]; then\n'
            '        eval "set -- $OCI_ENTRYPOINT $OCI_CMD"\n'
            "    else\n"
            '        CMDLINE_ARGS=""\n'
            '        for arg in "$@"; do\n'
            '            CMDLINE_ARGS="${CMDLINE_ARGS} \\"$arg\\""\n'
            "        done\n"
            '        eval "set -- $OCI_ENTRYPOINT $CMDLINE_ARGS"\n'
            "    fi\n"
            "fi\n"
            'if [ $# -eq 0 ]; then\n'
            '    set -- /bin/sh\n'
            'fi\n'
            'exec "$@"\n')


def definition(image: str) -> str:
    """What Apptainer records for a build from a URI (``docker-daemon://IMAGE``): its header."""
    ref = quoting.definition_line(image, "SIF definition file", "from")
    return f"bootstrap: docker-daemon\nfrom: {ref}\n"


# Go's time names (English whatever the locale), for build-date.
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")


def build_labels(image: str, goarch: str, when: int) -> dict[str, str]:
    """The ``org.label-schema.*`` labels Apptainer's build adds (metadata.go, addBuildLabels).

    ``build-date`` has Apptainer's shape (``Monday_2_August_2021_14:9:36_UTC``: no zero padding)
    but always in UTC. Apptainer's ``usage.apptainer.version`` is left out: no Apptainer built it.
    """
    t = time.gmtime(when)
    date = (f"{WEEKDAYS[t.tm_wday]}_{t.tm_mday}_{MONTHS[t.tm_mon - 1]}_{t.tm_year}_"
            f"{t.tm_hour}:{t.tm_min}:{t.tm_sec}_UTC")
    return {
        "org.label-schema.schema-version": "1.0",
        "org.label-schema.build-date": date,
        "org.label-schema.usage.singularity.deffile.bootstrap": "docker-daemon",
        "org.label-schema.usage.singularity.deffile.from": quoting.definition_line(image, "SIF labels", "from"),
        "org.label-schema.build-arch": goarch,
    }


NOT_UTF8 = re.compile("[\ud800-\udfff]")


def go_json(value: Any, indent: str | None = None) -> str:
    """JSON as Go's encoding/json writes it (Apptainer is Go): maps sorted by the caller's
    order, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped, other text as UTF-8, and each byte
    that is not UTF-8 (here a ``surrogateescape`` character) as U+FFFD."""
    text = json.dumps(value, ensure_ascii=False, indent=indent,
                      separators=(",", ": ") if indent is not None else (",", ":"))
    text = NOT_UTF8.sub("\ufffd", text)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def labels(config: dict[str, Any], image: str = "image", goarch: str = "amd64",
           when: int = 0) -> dict[str, str]:
    """The image's labels with Apptainer's build labels over them (as Apptainer merges them)."""
    return dict(sorted({**(config.get("Labels") or {}), **build_labels(image, goarch, when)}.items()))


def labels_json(config: dict[str, Any], image: str = "image", goarch: str = "amd64", when: int = 0) -> str:
    return go_json(labels(config, image, goarch, when), indent="\t")


def files(config: dict[str, Any], image: str = "image", *, goarch: str = "amd64",
          when: int = 0) -> dict[str, tuple[str, int]]:
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
    out[".singularity.d/labels.json"] = (labels_json(config, image, goarch, when), 0o644)
    out[".singularity.d/Singularity"] = (definition(image), 0o644)
    return out


# What `apptainer inspect --all` reads from a root filesystem (cmd/internal/cli/inspect.go), by
# attribute: the environment is every env/10-docker*.sh and env/9*-environment.sh by path.
INSPECT_FILES = {"runscript": ".singularity.d/runscript", "test": ".singularity.d/test",
                 "helpfile": ".singularity.d/runscript.help", "deffile": ".singularity.d/Singularity",
                 "startscript": ".singularity.d/startscript"}
INSPECT_ENV = (".singularity.d/env/10-docker*.sh", ".singularity.d/env/9*-environment.sh")


def inspect_metadata(layout: dict[str, tuple[str, int]]) -> bytes:
    """The ``inspect-metadata.json`` object Apptainer ≥ 1.4 writes into the SIF
    (internal/pkg/build/metadata.go, insertJSONInspectMetadata; its shape is pkg/inspect's
    Metadata): ``apptainer inspect`` reads it instead of starting a container. Apptainer fills
    it by running ``apptainer inspect --all`` on the root filesystem, which reads each file
    with its trailing newlines removed; this builds the same from ``layout`` (:func:`files`),
    so it says what the partition holds. Empty attributes are left out (``omitempty``)."""
    def text(path: str) -> str:
        return layout[path][0].rstrip("\n") if path in layout else ""

    env = {f"/{p}": text(p) for p in sorted(layout) if any(fnmatch.fnmatchcase(p, g) for g in INSPECT_ENV)}
    attributes: dict[str, Any] = {
        "environment": env,
        "labels": json.loads(layout[".singularity.d/labels.json"][0]) or {},
        "runscript": text(INSPECT_FILES["runscript"]),
        "test": text(INSPECT_FILES["test"]),
        "helpfile": text(INSPECT_FILES["helpfile"]),
        "deffile": text(INSPECT_FILES["deffile"]),
        "startscript": text(INSPECT_FILES["startscript"]),
    }
    attributes = {k: v for k, v in attributes.items() if v}
    return quoting.encode(go_json({"data": {"attributes": attributes}, "type": "container"}))


def keep(member: Member, replaced: frozenset[str]) -> bool:
    name = member.name
    if name == ".dockerenv" or name.startswith("dev/") or made_by_docker(member):
        return False
    return name not in replaced


def extra_entries(layout: dict[str, tuple[str, int]], mtime: int):
    """The directories, files (``layout``, from :func:`files`) and symlinks added to the tree."""

    def build(seen: set[str]):
        out = [dir_entry(d, mtime=mtime) for d in BASE_DIRS if d not in seen]
        out += [file_entry(p, quoting.encode(text), mode=mode, mtime=mtime) for p, (text, mode) in layout.items()]
        out += [symlink_entry(p, target, mtime=mtime) for p, target in SYMLINKS.items() if p not in seen]
        return out

    return build
