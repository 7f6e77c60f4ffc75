"""The dlopen closure check (imagekit.checks.dlopen), run by the image's own loader in a real container of
the Debian base: a name the binary carries and the loader finds passes; one it cannot find fails, named
with the binary that opens it; a name the build does not carry is not asked for; driver names are the
host's. (The fabric images' closure, before and after the J1 fix: tests/components/test_fabric_images.py.)"""

from __future__ import annotations

import re
import subprocess

import pytest

from imagekit import stack
from imagekit.checks import catalogue
from imagekit.checks.dlopen import DRIVER, OPTIONAL, Opens, closure_check
from imagekit.engines import docker as engine

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def run_in(image: str, check, before: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([engine.docker_cli(), "run", "--rm", "--entrypoint", "sh", image, "-c",
                           before + check.command], capture_output=True, text=True)


@pytest.mark.parametrize("kw, problem", [
    ({"names": ("cudart",)}, "not a library name"),
    ({"names": ("libnccl-net-%s.so",)}, "needs env"),
    ({"names": ("libx.so",), "env": "NCCL_NET_PLUGIN"}, "needs env"),
    ({"names": ("libx.so",), "by": "host"}, "must be one of"),
    ({"names": ("libx.so",), "why": "a|b"}, "without '|'"),
    ({"binary": "relative/libx.so", "names": ("libx.so",)}, "not an absolute path or a soname"),
])
def test_a_declaration_that_could_not_be_checked_is_refused(kw, problem):
    with pytest.raises(ValueError, match=problem):
        Opens(**{"binary": LIBC, "why": "w", **kw})


def test_every_stack_with_nccl_declares_what_nccl_opens():
    check = next(c for c in catalogue.stack_checks(stack.load("debian-mpi")) if c.id == "image.dlopen_closure")
    assert "libnccl.so.2|image|libibverbs.so,libibverbs.so.1|" in check.command
    assert "libnccl.so.2|driver|libcuda.so.1,libcuda.so|" in check.command


@pytest.mark.engine
def test_the_loader_resolves_what_the_binary_opens_and_names_what_it_cannot(base_image):
    # glibc opens libgcc_s.so.1 by name (pthread_cancel's unwinder): a real dlopen target of a real binary.
    opens = [Opens(LIBC, ("libgcc_s.so.1",), "nptl unwinder"),
             Opens(LIBC, ("libcudart.so",), "not in glibc's strings: not asked for"),
             Opens("libc.so.6", ("libidn2.so.0",), "a soname as the binary: found through ldconfig", by=DRIVER),
             Opens(LIBC, ("libgcc_s.so.1",), "optional and there", by=OPTIONAL)]
    good = run_in(base_image, closure_check(opens))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok       libc.so.6 opens libgcc_s.so.1 -> /" in good.stdout
    assert "absent   libc.so.6: this build does not open libcudart.so" in good.stdout
    assert "driver   libc.so.6 opens libidn2.so.0" in good.stdout
    assert "dlopen closure: 2 resolved, 0 missing, 1 from the host's driver, 1 not in this build" in good.stdout

    broken = run_in(base_image, closure_check(opens), "rm -f /lib/x86_64-linux-gnu/libgcc_s.so.1* && ldconfig && ")
    assert broken.returncode != 0
    assert ("MISSING  libc.so.6 opens libgcc_s.so.1: the loader cannot find it or its libraries: libgcc_s.so.1: "
            "cannot open shared object file") in broken.stdout
    assert "optional libc.so.6 opens libgcc_s.so.1: not found" in broken.stdout
    assert "dlopen closure: 0 resolved, 1 missing" in broken.stdout


@pytest.mark.engine
def test_a_template_is_filled_from_the_environment_and_fails_when_unset(base_image):
    """NCCL's net plugin name: the binary carries the template (or the part before %s); the variable names
    the library. The "binary" is a file made here that carries the template as NCCL does, NUL-ended."""
    check = closure_check([Opens("/usr/lib/ik-probe.bin", ("libik-%s.so",), "template", env="IMAGEKIT_X")])
    carry = "printf 'x\\0libik-%%s.so\\0y' > /usr/lib/ik-probe.bin && "
    unset = run_in(base_image, check, carry)
    assert unset.returncode != 0 and "opens libik-%s.so(IMAGEKIT_X unset)" in unset.stdout, unset.stdout
    # A file the loader finds under the name the template makes (libik-shim.so, a copy of libm).
    made = run_in(base_image, check, carry + "cp /lib/x86_64-linux-gnu/libm.so.6 /usr/lib/libik-shim.so && "
                  "ldconfig && export IMAGEKIT_X=shim && ")
    assert made.returncode == 0, made.stdout
    assert re.search(r"ok       ik-probe.bin opens libik-shim.so -> (/usr)?/lib/libik-shim.so", made.stdout)
    missing = run_in(base_image, check, carry + "export IMAGEKIT_X=none && ")
    assert missing.returncode != 0 and "MISSING  ik-probe.bin opens libik-none.so" in missing.stdout
    # Not carried at all (/bin/sh has no such string): not asked for.
    other = run_in(base_image, closure_check([Opens("/bin/sh", ("libik-%s.so",), "t", env="IMAGEKIT_X")]))
    assert other.returncode == 0 and "absent   sh: this build does not open libik-%s.so" in other.stdout


@pytest.mark.engine
def test_a_name_inside_a_longer_one_is_not_carried(base_image):
    """DT_NEEDED's "libz.so.1" is not a dlopen of "libz.so" (a -dev name no runtime has); "libgcc_s.so.1" at
    the end of a longer string still is."""
    check = closure_check([Opens("/usr/lib/ik-probe.bin", ("libz.so",), "substring"),
                           Opens("/usr/lib/ik-probe.bin", ("libgcc_s.so.1",), "tail of a message")])
    out = run_in(base_image, check, "printf 'libz.so.1\\0Could not load libgcc_s.so.1\\0' > /usr/lib/ik-probe.bin && ")
    assert out.returncode == 0, out.stdout
    assert "absent   ik-probe.bin: this build does not open libz.so" in out.stdout
    assert "ok       ik-probe.bin opens libgcc_s.so.1" in out.stdout


@pytest.mark.engine
def test_a_missing_binary_is_missing(base_image):
    out = run_in(base_image, closure_check([Opens("/opt/none/libx.so.1", ("libm.so.6",), "w")]))
    assert out.returncode != 0 and "MISSING  /opt/none/libx.so.1: not in the image" in out.stdout


@pytest.mark.engine
def test_a_library_that_does_not_load_itself_is_missing_first(base_image):
    """libidn2 links libunistring: without it, nothing libidn2 opens matters, and the check says so."""
    lib = "/usr/lib/x86_64-linux-gnu/libidn2.so.0"
    check = closure_check([Opens(lib, ("libunistring.so.2",), "its own library, as a stand-in")])
    out = run_in(base_image, check, "rm -f /usr/lib/x86_64-linux-gnu/libunistring.so.* && ldconfig && ")
    assert out.returncode != 0
    assert "MISSING  libidn2.so.0 does not load: libunistring.so.2: cannot open shared object file" in out.stdout
