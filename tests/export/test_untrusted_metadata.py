"""Untrusted image metadata in the exported config files: Enroot's /etc/rc, /etc/environment,
/etc/fstab, and the SIF's /.singularity.d scripts and definition file.

Enroot and Apptainer cannot be installed here. The files are run the way they run them:
``$SHELL /etc/rc ARGS`` by enroot-switchroot, inside the root filesystem (``chroot`` over a tree
unpacked from a real export, in a private mount namespace for the reproducer's /mnt), with
/etc/environment loaded; the env scripts sourced and the runscript executed as Apptainer's
actions do. Every payload would create ``$IK_CANARY`` if it ran.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.export_helpers import unsquash
from helpers.hostile import CANARY_VAR, REPRODUCER, nul_free_lists, nul_free_words, word_lists, words
from imagekit import image_facts
from imagekit.util import quoting
from imagekit.image_facts import reader
from imagekit.export import ExportRequest, enroot, export_image, sif, singularity_d

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PRINT_WORDS = ["/bin/sh", "-c", 'printf "%s\\0" "$PWD" "$@"', "sh"]
# Every character str.splitlines() ends a line at but sh does not (issue 22, F10).
SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.fixture(scope="module")
def sandbox(odd_image, tmp_path_factory) -> Path:
    """A root filesystem from a real export to chroot into; hostile runs write only inside it."""
    work = tmp_path_factory.mktemp("hostile")
    return unsquash(Path(export_image(odd_image, ExportRequest("enroot"), work / "odd.sqsh").path), work / "root")


def _chroot(tree: Path, argv: list[str], env: dict[str, str]) -> bytes:
    canary = tree / "canary"
    canary.unlink(missing_ok=True)
    proc = subprocess.run([shutil.which("chroot"), str(tree), *argv], capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **env, CANARY_VAR: "/canary"})
    assert not canary.exists(), "an injected command ran"
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _parses(text: str, tmp_path: Path) -> None:
    script = tmp_path / "parse.sh"
    script.write_bytes(quoting.encode(text))
    for shell in ("sh", "bash"):
        proc = subprocess.run([shell, "-n", str(script)], capture_output=True)
        assert proc.returncode == 0, (shell, proc.stderr)


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [t for k, v in obj.items() for t in _strings(k) + _strings(v)]
    return [t for item in obj for t in _strings(item)]


def _unreadable_label(item: tuple[str, str]) -> bool:
    """A label one `# KEY VALUE` line cannot carry: refused at export (F10), never changed."""
    key, value = item
    return (not key or bool(re.search(r"[\s\x00-\x1f\x7f]", key)) or "\n" in value or "\r" in value
            or bool(re.search("[\udc80-\udcff]", key + value)))


def _workdir(word: str) -> str:
    return "/" + word.replace("/", "_").replace("\x00", "")[:100] if word.strip(".") else "/"


# ---------------------------------------------------------------- Enroot: property tests


@PROPERTY
@given(labels=st.dictionaries(words, words, max_size=4), ep=word_lists, cmd=word_lists, wd=words,
       env=st.lists(words, max_size=4))
@pytest.mark.engine
def test_enroot_rc_runs_no_injected_command(sandbox, tmp_path, labels, ep, cmd, wd, env):
    """Hostile labels, Entrypoint, Cmd, WorkingDir and Env: refused with the field named, or /etc/rc
    parses, keeps one comment line per label, and hands the process exactly the image's words."""
    config = {"Labels": labels, "Entrypoint": PRINT_WORDS + ep, "Cmd": cmd, "WorkingDir": _workdir(wd),
              "Env": [f"V{i}={v}" for i, v in enumerate(env)]}
    try:
        files = enroot.config_files(config, "hostile:1")
    except quoting.UnsafeValue as exc:
        assert exc.where == "image hostile:1" and "\n" not in exc.message
        assert any("\x00" in t for t in _strings(config)) or any(quoting.CONTROL.search(v) for v in env) \
            or quoting.CONTROL.search(config["WorkingDir"]) or any(map(_unreadable_label, labels.items()))
        return
    rc = files["etc/rc"]
    _parses(rc, tmp_path)
    assert len(re.findall(r"^# ", rc, re.M)) == len(labels)
    assert image_facts.rc_labels(rc) == labels   # F10: every label reads back as itself
    assert files["etc/environment"].count("\n") == len(env)
    for name, text in files.items():
        (sandbox / name).write_bytes(quoting.encode(text))
    environment = dict(line.split("=", 1) for line in files["etc/environment"].splitlines())
    out = _chroot(sandbox, ["/bin/sh", "/etc/rc"], environment).split(b"\0")[:-1]
    assert out == [quoting.encode(w) for w in [config["WorkingDir"], *ep, *cmd]]
    out = _chroot(sandbox, ["/bin/bash", "/etc/rc", "--", "x"], environment).split(b"\0")[:-1]
    assert out[1:] == [quoting.encode(w) for w in [*ep, "--", "x"]]


@given(volumes=st.lists(words, max_size=4))
def test_enroot_fstab_has_one_mount_per_volume(volumes):
    """A Volume path that the fstab cannot carry (whitespace, NUL, $, .., a relative path) is
    refused; every other one becomes exactly one line of exactly five fields."""
    config = {"Volumes": {("/" + v if i % 2 else v): {} for i, v in enumerate(volumes)}}
    try:
        text = enroot.config_files(config, "hostile:1")["etc/fstab"]
    except quoting.UnsafeValue as exc:
        assert exc.field == "Volume" and exc.where == "image hostile:1"
        return
    lines = text.splitlines()
    assert len(lines) == len(config["Volumes"])
    for line, volume in zip(lines, sorted(config["Volumes"])):
        assert line.split() == ["${ENROOT_ROOTFS}" + volume, volume, "none", "x-create=dir,bind,rw,nosuid,nodev"]
        assert line.count("$") == 1


@pytest.mark.parametrize("field,value,message", [
    ("Env", ["NOTE=harmless\nLD_PRELOAD=/tmp/x.so"], r"Env\[0\] \(NOTE\) value .* control character"),
    ("Env", ["BAD\nNAME=1"], r"Env\[0\] name .* not a valid variable name"),
    ("Env", ["A;touch /x=1"], r"Env\[0\] name"),
    ("Volumes", {"/a b": {}}, r"Volume '/a b' cannot be written to Enroot's /etc/fstab"),
    ("Volumes", {"/data\n/x": {}}, r"Volume .* control character"),
    ("Volumes", {"/../../etc": {}}, r"Volume '/../../etc' is not a clean absolute path"),
    ("Volumes", {"/x${HOME}": {}}, r"Volume"),
    ("WorkingDir", "/w\nd", r"WorkingDir .* control character"),
    ("Cmd", ["a\x00b"], r"Cmd\[0\] .* NUL byte"),
    # F19: /etc/rc's `exec -a NAME` (bash, busybox) would take it; dash refuses `exec --`
    ("Entrypoint", ["-a", "FAKE", "/bin/sh"], r"Entrypoint\[0\] '-a' starts with '-', which /etc/rc's `exec`"),
    ("Cmd", ["-c", "true"], r"Cmd\[0\] '-c' starts with '-'"),
    ("Labels", {"note": "a\nb"}, r"label 'note' 'a\\nb' contains '\\n'"),
])
def test_unrepresentable_values_are_refused_naming_image_field_and_value(field, value, message):
    with pytest.raises(quoting.UnsafeValue, match=rf"^image site/img:1: {message}"):
        enroot.config_files({field: value}, "site/img:1")


def test_a_dash_word_after_the_first_reaches_the_process():
    """Only the first executed word is exec's: a later one is an argument (the property test runs them)."""
    rc = enroot.config_files({"Entrypoint": ["/bin/echo", "-a"], "Cmd": ["-x"]}, "site/img:1")["etc/rc"]
    assert "exec '/bin/echo' '-a' '-x'" in rc
    assert enroot.config_files({"Cmd": ["/bin/echo", "-n"]}, "site/img:1")


# ---------------------------------------------------------------- SIF: property tests


@PROPERTY
@given(ep=nul_free_lists, cmd=nul_free_lists, env=st.lists(nul_free_words, max_size=4), path=nul_free_words)
@pytest.mark.engine
def test_sif_scripts_run_no_injected_command(sandbox, tmp_path, ep, cmd, env, path):
    """The env script hands every Env value over byte for byte (newlines included, PATH forced);
    the runscript runs exactly ENTRYPOINT + CMD, or ENTRYPOINT + the arguments."""
    config = {"Entrypoint": ["/usr/bin/printf", "%s\\0", "START", *ep], "Cmd": cmd,
              "Env": [f"PATH=/usr/bin:/bin:{path}", *[f"V{i}={v}" for i, v in enumerate(env)]]}
    files = singularity_d.files(config, "hostile:1")
    for name in (".singularity.d/env/10-docker2singularity.sh", ".singularity.d/runscript"):
        _parses(files[name][0], tmp_path)
        (sandbox / name).parent.mkdir(parents=True, exist_ok=True)
        (sandbox / name).write_bytes(quoting.encode(files[name][0]))
        (sandbox / name).chmod(0o755)
    names = " ".join(f'"$V{i}"' for i in range(len(env)))
    out = _chroot(sandbox, ["/bin/sh", "-c", ". /.singularity.d/env/10-docker2singularity.sh; "
                            f'printf "%s\\0" "$PATH" {names}'], {})
    assert out.split(b"\0")[:-1] == [quoting.encode(v) for v in [f"/usr/bin:/bin:{path}", *env]]
    out = _chroot(sandbox, ["/bin/sh", "/.singularity.d/runscript"], {})
    assert out.split(b"\0")[1:-1] == [quoting.encode(w) for w in [*ep, *cmd]]
    out = _chroot(sandbox, ["/bin/sh", "/.singularity.d/runscript", "-x", "a b"], {})
    assert out.split(b"\0")[1:-1] == [quoting.encode(w) for w in [*ep, "-x", "a b"]]
    # apptainer run --no-eval: the arguments too arrive as they are
    out = _chroot(sandbox, ["/bin/sh", "/.singularity.d/runscript", "-x", "$(y)"], {"SINGULARITY_NO_EVAL": "1"})
    assert out.split(b"\0")[1:-1] == [quoting.encode(w) for w in [*ep, "-x", "$(y)"]]
    # inspect-metadata.json says exactly what the files hold
    # (as Go writes JSON: each byte that is not UTF-8 becomes U+FFFD)
    attributes = json.loads(singularity_d.inspect_metadata(files))["data"]["attributes"]
    for name, key in ((".singularity.d/runscript", "runscript"),
                      (".singularity.d/env/10-docker2singularity.sh", "environment")):
        got = attributes[key] if key == "runscript" else attributes[key]["/" + name]
        assert got == re.sub("[\udc80-\udcff]", "\ufffd", files[name][0].rstrip("\n"))


@given(name=words)
def test_sif_refuses_env_names_a_shell_cannot_export(name):
    entry = f"{name}=1"
    # The name ends at the first "=": a generated "_=\n" gives the name "_" and the value "\n=1",
    # which is single-quoted over two lines, or refused as a value when it holds a NUL.
    key, _, value = entry.partition("=")
    valid = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)
    try:
        text = singularity_d.files({"Env": [entry]}, "hostile:1")[".singularity.d/env/10-docker2singularity.sh"][0]
    except quoting.UnsafeValue as exc:
        assert exc.field == "Env[0] name" or (valid and exc.field == f"Env[0] ({key}) value" and "\0" in value)
        return
    assert valid and text.count("\n") == 3 + value.count("\n")


@given(image=words)
def test_definition_file_is_two_lines(image):
    try:
        text = sif.definition_file(image).decode("utf-8", "surrogateescape")
    except quoting.UnsafeValue as exc:
        assert exc.field == "from"
        return
    assert text.splitlines() == ["bootstrap: docker-daemon", f"from: {image}"]


# ---------------------------------------------------------------- the reproducer, end to end


def _run_rc_like_enroot(tree: Path, proof_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """enroot-switchroot's start: the host directory mounted at /mnt (as `--mount` or
    `--container-mounts` would), then `$SHELL /etc/rc ARGS` inside the root filesystem."""
    script = ('mount --bind "$1" "$2/mnt" && shift 2 && exec chroot "$0" /bin/sh /etc/rc "$@"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           str(tree), str(proof_dir), str(tree), *args],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/bin"})


@pytest.mark.engine
def test_reproducer_label_newline_is_refused_and_writes_nothing(make_image, tmp_path):
    """Issue 11's reproducer, a label `note harmless⏎echo INJECTED >> /mnt/proof`: Enroot's import
    makes the newline a space, so the label would read back changed (issue 22, F10); the export
    refuses it, naming the image and the label, before anything is written."""
    image = make_image("imagekit-test/hostile-label:1", Labels={"note": REPRODUCER})
    with pytest.raises(quoting.UnsafeValue, match=r"^image imagekit-test/hostile-label:1: label 'note' .* "
                                                  r"contains '\\n', which would end its comment line"):
        export_image(image, ExportRequest("enroot"), tmp_path / "x.sqsh")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_a_label_with_unicode_line_separators_runs_nothing_and_reads_back(make_image, tmp_path):
    """The same payload behind each character str.splitlines() breaks at and sh does not (F10): one
    comment line in /etc/rc, started as Enroot starts it (also what Pyxis runs under
    --no-container-entrypoint: rc.local is `exec "$@"`) it writes nothing through the mount, and the
    labels read back from the .sqsh exactly."""
    labels = {f"note{i}": f"harmless{sep}echo INJECTED >> /mnt/proof" for i, sep in enumerate(SEPARATORS)}
    image = make_image("imagekit-test/hostile-label-separators:1", Labels=labels)
    out = export_image(image, ExportRequest("enroot"), tmp_path / "x.sqsh")
    assert reader.read(out.path).labels == labels
    tree = unsquash(Path(out.path), tmp_path / "root")
    proof = tmp_path / "host-mnt"
    proof.mkdir()
    started = _run_rc_like_enroot(tree, proof, "/bin/echo", "started")
    assert started.returncode == 0, started.stderr
    assert started.stdout == "started\n"
    (tree / "etc/rc.local").write_text('exec "$@"\n')  # Pyxis with --no-container-entrypoint
    assert _run_rc_like_enroot(tree, proof, "/bin/true").returncode == 0
    assert not (proof / "proof").exists(), "a label's second line ran as a command"


@pytest.mark.engine
def test_hostile_image_exports_run_exactly_its_words(make_image, tmp_path):
    """Quotes, $(), backticks, ; and newlines in Entrypoint/Cmd/Env/WorkingDir through the real
    pipeline (inspect, export, unsquash), to both formats."""
    payload = "it's \"$(touch /canary)\" `touch /canary`; touch /canary && x\nnext"
    image = make_image("imagekit-test/hostile-config:1", Entrypoint=["/usr/bin/printf", "%s\\0"],
                       Cmd=[payload, "-rf", "#"], Env=["PATH=/usr/bin:/bin", "NOTE=$(touch /canary) 'q' \\"],
                       WorkingDir="/work $(x) `y`", Labels={"a.b": REPRODUCER.replace("\n", "\u2028")})
    exported = export_image(image, ExportRequest("enroot"), tmp_path / "x.sqsh")
    assert reader.read(exported.path).labels["a.b"] == REPRODUCER.replace("\n", "\u2028")
    sqsh = unsquash(Path(exported.path), tmp_path / "e")
    environment = dict(line.split("=", 1) for line in (sqsh / "etc/environment").read_text().splitlines())
    assert environment["NOTE"] == "$(touch /canary) 'q' \\"
    assert _chroot(sqsh, ["/bin/sh", "/etc/rc"], environment).split(b"\0")[:-1] == \
        [w.encode() for w in (payload, "-rf", "#")]
    assert (sqsh / "work $(x) `y`").is_dir()
    out = Path(export_image(image, ExportRequest("sif"), tmp_path / "x.sif").path)
    tree = unsquash(out, tmp_path / "s", offset=sif.read_sif(out).primary_partition().offset)
    assert _chroot(tree, ["/.singularity.d/actions/run"], {}).split(b"\0")[:-1] == \
        [w.encode() for w in (payload, "-rf", "#")]
    assert _chroot(tree, ["/.singularity.d/actions/exec", "/bin/sh", "-c", 'printf %s "$NOTE"'], {}) == \
        b"$(touch /canary) 'q' \\"


@pytest.mark.engine
def test_unrepresentable_volume_refused_before_anything_is_written(make_image, tmp_path):
    image = make_image("imagekit-test/hostile-volume:1", Volumes={"/data\n/etc": {}})
    with pytest.raises(quoting.UnsafeValue, match=r"image imagekit-test/hostile-volume:1: Volume"):
        export_image(image, ExportRequest("enroot"), tmp_path / "x.sqsh")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("volume,symlinks,refused", [
    ("/data", {"data"}, True),
    ("/a/b/c", {"a"}, True),            # a parent: mount(2) follows it as well
    ("/a/b/c", {"a/b"}, True),
    ("/a/b/c", {"a/b/c"}, True),
    ("/a/bc", {"a/b"}, False),          # a sibling's name is no prefix
    ("/data", {"opt/data"}, False),
    ("/data/", {"data"}, True),
])
def test_a_volume_through_a_symlink_is_refused(volume, symlinks, refused):
    """F9 (tests/export/test_untrusted_metadata_runtimes.py shows Enroot following it on the host)."""
    config = {"Volumes": {volume: {}}}
    if refused:
        with pytest.raises(quoting.UnsafeValue, match="a symlink in the image"):
            enroot.volume_through_symlink(config, symlinks, "img:1")
    else:
        enroot.volume_through_symlink(config, symlinks, "img:1")
