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

# Recorded in the shape of Docker 28's plain progress for imagekit's two-stage recipes. Both stages
# start FROM the same image, so BuildKit runs that step once and names it for one stage (here
# runtime): devel never prints its 1/5. Cached steps come in no order (devel's 3/5 before its 2/5);
# devel's compile is cut in on by runtime's step, and its line printed again when it resumes.
HEAD = """\
#1 [internal] load build definition from Dockerfile
#1 sha256:016ebd85f3b0020f36bec7aa106880335531a4089722c431ebb1a89079efdafb
#1 transferring dockerfile: 1.71kB done
#1 DONE 0.0s

#2 [internal] load .dockerignore
#2 transferring context: 2B done
#2 DONE 0.0s

#3 [internal] load metadata for docker.io/imagekit/debian:bookworm
#3 DONE 0.0s

#4 [runtime 1/4] FROM docker.io/imagekit/debian:bookworm
#4 sha256:08c10eef2d985ffed1e2bb2a838c1931ad04fffb254eedad73f01fd6727e49b3
#4 DONE 0.0s

#5 [devel 3/5] RUN rm -f /etc/apt/apt.conf.d/docker-clean
#5 sha256:a9b59ffe1749f9a628e06b12923fb97db7e271e6c30a6fd954da883f6ffe3295
#5 CACHED

#6 [runtime 2/4] RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y && apt-get install -y libgomp1
#6 CACHED

#7 [devel 2/5] RUN --mount=type=cache,id=apt,target=/var/cache/apt apt-get update -y &&     apt-get install -y gcc
#7 CACHED

#8 [devel 4/5] RUN make -C /opt/src install
#8 0.512 cc -O2 -c ring.c
#8 ...

#9 [runtime 3/4] RUN useradd -m hpc
#9 DONE 0.3s

#8 [devel 4/5] RUN make -C /opt/src install
#8 2.104 cc -o ring ring.o
#8 DONE 2.4s

"""

FAILS = HEAD + """\
#10 [devel 5/5] RUN /opt/bin/selftest
#10 0.201 selftest: checking
#10 0.305 selftest: FAILED
#10 ERROR: process "/bin/sh -c /opt/bin/selftest" did not complete successfully: exit code: 1
------
 > [devel 5/5] RUN /opt/bin/selftest:
0.201 selftest: checking
0.305 selftest: FAILED
------
Dockerfile:9
--------------------
   8 |     RUN make -C /opt/src install
   9 | >>> RUN /opt/bin/selftest
--------------------
ERROR: failed to solve: process "/bin/sh -c /opt/bin/selftest" did not complete successfully: exit code: 1
"""

PASSES = HEAD + """\
#10 [devel 5/5] RUN /opt/bin/selftest
#10 0.305 selftest: ok
#10 DONE 0.4s

#11 [runtime 4/4] COPY --from=devel /opt/bin /opt/bin
#11 DONE 0.1s

#12 exporting to image
#12 exporting layers 0.2s done
#12 writing image sha256:5d1c0c0ffee done
#12 DONE 0.3s
"""

# A rebuild with nothing changed: every step cached, printed in no order, devel's 1/3 never.
ALL_CACHED = """\
#4 [runtime 1/3] FROM docker.io/imagekit/debian:bookworm
#4 DONE 0.0s

#9 [devel 3/3] RUN make -C /opt/src install
#9 CACHED

#6 [runtime 3/3] COPY --from=devel /opt/bin /opt/bin
#6 CACHED

#8 [devel 2/3] RUN apt-get install -y gcc
#8 CACHED

#5 [runtime 2/3] RUN apt-get install -y libgomp1
#5 CACHED

#10 exporting to image
#10 DONE 0.0s
"""

SHOWN_BEFORE_SELFTEST = [
    "[runtime 1/4] 0.0 s    FROM docker.io/imagekit/debian:bookworm",
    "[runtime 2/4] cached   RUN apt-get update -y && apt-get install -y libgomp1",
    # devel's steps wait for its missing 1/5 until its 4/5 is seen running.
    "[devel 2/5] cached   RUN apt-get update -y &&     apt-get install -y gcc",
    "[devel 3/5] cached   RUN rm -f /etc/apt/apt.conf.d/docker-clean",
    "[runtime 3/4] 0.3 s    RUN useradd -m hpc",
    "[devel 4/5] 2.4 s    RUN make -C /opt/src install",
]


def _printing(tmp_path, transcript: str, rc: int) -> list[str]:
    path = tmp_path / "transcript.txt"
    path.write_text(transcript)
    return [sys.executable, "-c",
            f"import sys; sys.stdout.write(open({str(path)!r}).read()); sys.exit({rc})"]


def test_interleaved_stages_are_shown_each_in_order_with_cached_marks_and_failed(tmp_path):
    shown: list[str] = []
    with pytest.raises(build.BuildError) as err:
        build._run_build(_printing(tmp_path, FAILS, 1), tmp_path / "build.log", shown.append)
    assert shown == SHOWN_BEFORE_SELFTEST + ["[devel 5/5] FAILED   RUN /opt/bin/selftest"]
    # The error names the step as the progress lines and the log do, with the step's own last lines.
    assert err.value.step == "[devel 5/5] RUN /opt/bin/selftest"
    assert err.value.tail[-1] == "0.305 selftest: FAILED"
    assert "exit code: 1" in str(err.value)
    assert (tmp_path / "build.log").read_text() == FAILS


def test_a_finished_build_shows_every_step_and_counts_the_cached_ones(tmp_path):
    shown: list[str] = []
    steps, cached = build._run_build(_printing(tmp_path, PASSES, 0), tmp_path / "build.log", shown.append)
    assert shown == SHOWN_BEFORE_SELFTEST + ["[devel 5/5] 0.4 s    RUN /opt/bin/selftest",
                                             "[runtime 4/4] 0.1 s    COPY --from=devel /opt/bin /opt/bin"]
    assert (steps, cached) == (8, 3)


def test_a_fully_cached_build_shows_each_stage_in_order_once_it_ends(tmp_path):
    shown: list[str] = []
    steps, cached = build._run_build(_printing(tmp_path, ALL_CACHED, 0), tmp_path / "build.log", shown.append)
    assert [line for line in shown if line.startswith("[runtime")] == [
        "[runtime 1/3] 0.0 s    FROM docker.io/imagekit/debian:bookworm",
        "[runtime 2/3] cached   RUN apt-get install -y libgomp1",
        "[runtime 3/3] cached   COPY --from=devel /opt/bin /opt/bin"]
    assert [line for line in shown if line.startswith("[devel")] == [
        "[devel 2/3] cached   RUN apt-get install -y gcc",
        "[devel 3/3] cached   RUN make -C /opt/src install"]
    assert (steps, cached) == (5, 4)


def test_a_long_step_is_announced_once_before_it_finishes(tmp_path, monkeypatch):
    monkeypatch.setattr(build._Steps, "ANNOUNCE_AFTER", 0.0)
    shown: list[str] = []
    build._run_build(_printing(tmp_path, PASSES, 0), tmp_path / "build.log", shown.append)
    make = [i for i, line in enumerate(shown) if line.endswith("RUN make -C /opt/src install")]
    assert [shown[i][:22] for i in make] == ["[devel 4/5] ...      R", "[devel 4/5] 2.4 s    R"]
    # Only the step a stage waits on is announced, never one queued behind it.
    assert not any(line.startswith("[devel 5/5] ...") for line in shown[:make[1]])


# A step another build made first keeps that build's name: BuildKit printed `[devel 2/27]` before this
# build's `[devel 3/17]` (review 4). The totals shown come from the Dockerfile built.
SHARED = ALL_CACHED.replace("#4 [runtime 1/3]", "#4 [runtime 1/44]").replace("#8 [devel 2/3]", "#8 [devel 2/40]")
DOCKERFILE = """\
FROM imagekit/debian:bookworm AS devel
RUN apt-get install -y gcc
ENV CC=gcc
RUN make -C /opt/src \\
    install
LABEL x=y

FROM imagekit/debian:bookworm AS runtime
RUN apt-get install -y libgomp1
COPY --from=devel /opt/bin /opt/bin
"""


def test_step_totals_come_from_the_dockerfile_not_from_a_step_another_build_named(tmp_path):
    totals = build.stage_totals(DOCKERFILE)
    assert totals == {"devel": 3, "runtime": 3}     # FROM, RUN, COPY count; ENV and LABEL do not
    shown: list[str] = []
    build._run_build(_printing(tmp_path, SHARED, 0), tmp_path / "build.log", shown.append, totals=totals)
    assert {line.split("]")[0].split("/")[1] for line in shown} == {"3"}, shown


def test_the_rendered_recipes_totals_are_buildkits():
    """What BuildKit 20.10 printed for debian-mpi's steps here: [devel 14/14] and [runtime 13/13]."""
    from imagekit import render, stack

    assert build.stage_totals(render.render(stack.load("debian-mpi"), "docker")) == {"devel": 14, "runtime": 13}


def test_a_running_step_says_so_every_heartbeat_output_or_not():
    shown: list[str] = []
    steps = build._Steps(shown.append, {"devel": 5})
    steps.started("8", "devel", 1, 5, "FROM x")
    steps.finished("8", "0.0 s")
    steps.started("9", "devel", 2, 5, "RUN make")
    start = steps.steps["9"]["since"]
    steps.heartbeat(steps.last_said + 1)         # said something a second ago: quiet
    assert shown == ["[devel 1/5] 0.0 s    FROM x"]
    steps.heartbeat(start + 12)
    assert shown[-1] == "[devel 2/5] running 12 s  RUN make"
    steps.heartbeat(start + 14)                  # 2 s after that: quiet again
    assert len(shown) == 2
