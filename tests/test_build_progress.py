"""How a Docker build's steps are shown: in each stage's order, marked cached, with their time, or FAILED.

The transcripts here follow BuildKit's ``--progress=plain`` format (``#N [stage n/total] CMD`` as a
step starts, ``#N DONE 1.2s`` / ``#N CACHED`` / ``#N ERROR: ...`` as it ends, ``#N ...`` when another
step's lines cut in and the step's line again when its own resume) and are printed by a stand-in
command, so these tests need no engine. The real builds in tests/test_build.py run the same parser
against a real engine's output.
"""

import sys

import pytest

from imagekit import build

DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM imagekit/debian:bookworm AS devel
RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y && \\
    apt-get install -y gcc
ENV PATH=/opt/bin:$PATH
RUN make -C /opt/src install
RUN /opt/bin/selftest
LABEL io.imagekit.stack="demo"

FROM imagekit/debian:bookworm AS runtime
RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y && apt-get install -y libgomp1
RUN useradd -m hpc
COPY --from=devel /opt/bin /opt/bin
LABEL io.imagekit.stack="demo" \\
    io.imagekit.target="runtime"
"""

# Both stages start from the same image, so BuildKit runs one FROM step (named for devel); the
# runtime stage's steps run beside devel's, and devel's compile is cut in on by runtime's step.
HEAD = """\
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 712B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/imagekit/debian:bookworm
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [devel 1/6] FROM docker.io/imagekit/debian:bookworm
#4 DONE 0.0s

#5 [devel 2/6] RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y &&     apt-get install -y gcc
#5 CACHED

#6 [runtime 2/5] RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y && apt-get install -y libgomp1
#6 CACHED

#7 [devel 4/6] RUN make -C /opt/src install
#7 0.512 cc -O2 -c ring.c
#7 ...

#8 [runtime 3/5] RUN useradd -m hpc
#8 DONE 0.3s

#7 [devel 4/6] RUN make -C /opt/src install
#7 2.104 cc -o ring ring.o
#7 DONE 2.4s

"""

FAILS = HEAD + """\
#9 [devel 5/6] RUN /opt/bin/selftest
#9 0.201 selftest: checking
#9 0.305 selftest: FAILED
#9 ERROR: process "/bin/sh -c /opt/bin/selftest" did not complete successfully: exit code: 1
------
 > [devel 5/6] RUN /opt/bin/selftest:
0.201 selftest: checking
0.305 selftest: FAILED
------
Dockerfile:7
--------------------
   5 |     ENV PATH=/opt/bin:$PATH
   6 |     RUN make -C /opt/src install
   7 | >>> RUN /opt/bin/selftest
--------------------
ERROR: failed to solve: process "/bin/sh -c /opt/bin/selftest" did not complete successfully: exit code: 1
"""

PASSES = HEAD + """\
#9 [devel 5/6] RUN /opt/bin/selftest
#9 0.305 selftest: ok
#9 DONE 0.4s

#10 [runtime 4/5] COPY --from=devel /opt/bin /opt/bin
#10 DONE 0.1s

#11 exporting to image
#11 exporting layers 0.2s done
#11 writing image sha256:5d1c0c0ffee done
#11 DONE 0.3s
"""

SHOWN_BEFORE_SELFTEST = [
    "[devel 1/4] 0.0 s    FROM docker.io/imagekit/debian:bookworm",
    "[devel 2/4] cached   RUN apt-get update -y &&     apt-get install -y gcc",
    "[runtime 2/4] cached   RUN apt-get update -y && apt-get install -y libgomp1",
    "[runtime 3/4] 0.3 s    RUN useradd -m hpc",
    "[devel 3/4] 2.4 s    RUN make -C /opt/src install",
]


def _printing(tmp_path, transcript: str, rc: int) -> list[str]:
    path = tmp_path / "transcript.txt"
    path.write_text(transcript)
    return [sys.executable, "-c",
            f"import sys; sys.stdout.write(open({str(path)!r}).read()); sys.exit({rc})"]


def test_interleaved_stages_are_shown_each_in_order_with_cached_marks_and_failed(tmp_path):
    shown: list[str] = []
    with pytest.raises(build.BuildError) as err:
        build._run_build(_printing(tmp_path, FAILS, 1), tmp_path / "build.log", shown.append,
                         build.stage_steps(DOCKERFILE))
    assert shown == SHOWN_BEFORE_SELFTEST + ["[devel 4/4] FAILED   RUN /opt/bin/selftest"]
    # The error numbers the step as the progress lines did, and keeps the step's own last lines.
    assert err.value.step == "[devel 4/4] RUN /opt/bin/selftest"
    assert err.value.tail[-1] == "0.305 selftest: FAILED"
    assert "exit code: 1" in str(err.value)
    assert (tmp_path / "build.log").read_text() == FAILS


def test_a_finished_build_shows_every_step_and_counts_the_cached_ones(tmp_path):
    shown: list[str] = []
    steps, cached = build._run_build(_printing(tmp_path, PASSES, 0), tmp_path / "build.log", shown.append,
                                     build.stage_steps(DOCKERFILE))
    assert shown == SHOWN_BEFORE_SELFTEST + ["[devel 4/4] 0.4 s    RUN /opt/bin/selftest",
                                             "[runtime 4/4] 0.1 s    COPY --from=devel /opt/bin /opt/bin"]
    assert (steps, cached) == (7, 2)


def test_without_the_recipe_s_count_buildkit_s_own_numbers_are_shown(tmp_path):
    shown: list[str] = []
    build._run_build(_printing(tmp_path, PASSES, 0), tmp_path / "build.log", shown.append)
    assert shown[0] == "[devel 1/6] 0.0 s    FROM docker.io/imagekit/debian:bookworm"
    assert shown[-1] == "[runtime 4/5] 0.1 s    COPY --from=devel /opt/bin /opt/bin"


def test_a_long_step_is_announced_once_before_it_finishes(tmp_path, monkeypatch):
    monkeypatch.setattr(build._Steps, "ANNOUNCE_AFTER", 0.0)
    shown: list[str] = []
    build._run_build(_printing(tmp_path, PASSES, 0), tmp_path / "build.log", shown.append,
                     build.stage_steps(DOCKERFILE))
    make = [i for i, line in enumerate(shown) if line.endswith("RUN make -C /opt/src install")]
    assert [shown[i][:22] for i in make] == ["[devel 3/4] ...      R", "[devel 3/4] 2.4 s    R"]
    # Only the step a stage waits on is announced, never one queued behind it.
    assert not any(line.startswith("[devel 4/4] ...") for line in shown[:make[1]])


def test_stage_steps_counts_what_buildkit_numbers_and_what_it_shows():
    stages = build.stage_steps(DOCKERFILE)
    assert stages == {"devel": [True, True, False, True, True, False],
                      "runtime": [True, True, True, True, False]}
    # An unnamed stage is stage-N; --platform is no stage name; WORKDIR is shown, ARG is not.
    other = build.stage_steps("FROM --platform=linux/arm64 debian:12 AS Base\nARG X=1\nWORKDIR /w\n"
                              "FROM base\nRUN true\n")
    assert other == {"base": [True, False, True], "stage-1": [True, True]}
