"""``launch.session``: the one launch flow. Here: what ``--validate`` holds the job's output to, and that
the gates fail before anything is read or started."""


import pytest
from click.testing import CliRunner


from imagekit.cli import main  # noqa: E402
from imagekit.image_facts import reader  # noqa: E402
from imagekit.launch.session import LaunchRequest, Session, judge  # noqa: E402
from imagekit.validate import Gates  # noqa: E402
from helpers.validate_gen import Spec, nccl_log, nccl_tests_output  # noqa: E402

RUN, _ = nccl_tests_output(Spec(style="new", hosts=("node-a", "node-b"), check=False))


class _Job:
    """A Launcher (imagekit.launch.launcher) whose job is the test's function: no job is started."""

    name = "test"

    def __init__(self, fn) -> None:
        self.run = fn



def test_the_images_nccl_is_held_against_the_one_the_run_loaded():
    """nccl_log prints 'NCCL version 2.21.5+cuda12.4'; an image recording another NCCL fails the run (9)."""
    verdict, text = judge(RUN + nccl_log("IB"), Gates(), image="site/nccl:1", image_nccl="2.21.5")
    assert verdict.exit_code == 0 and "the run used the image's NCCL 2.21.5" in text
    verdict, text = judge(RUN + nccl_log("IB"), Gates(), image="site/nccl:1", image_nccl="2.23.4")
    assert verdict.exit_code == 9
    assert "the run loaded NCCL 2.21.5+cuda12.4, and site/nccl:1 records NCCL 2.23.4" in text


def test_a_run_that_does_not_say_its_nccl_is_noted_not_failed():
    """The user's own command may run without NCCL_DEBUG=INFO: the check is named as not done."""
    verdict, text = judge(RUN, Gates(), image="site/nccl:1", image_nccl="2.23.4")
    assert verdict.exit_code == 0 and "NCCL 2.23.4 was not checked" in text
    verdict, text = judge(RUN, Gates(), image="site/mpi:1", image_nccl=None)
    assert verdict.exit_code == 0 and "was not checked" not in text


@pytest.mark.engine
def test_validate_reads_the_nccl_from_the_images_labels(mpi_image, capsys):
    """debian-mpi records its NCCL wheel (the stack's pin): a job whose output shows another NCCL exits 9."""
    from imagekit import stack

    pinned = stack.load("debian-mpi").get("nccl").version
    assert pinned != "2.23.4"
    def run(stdout) -> int:
        stdout.write(RUN + nccl_log("IB").replace("NCCL version 2.21.5", "NCCL version 2.23.4"))
        return 0

    request = LaunchRequest(mpi_image, command=("all_reduce_perf",), gates=Gates(), preflight=False)
    session = Session(request, log=print, echo=lambda text: print(text, end=""))
    assert session.image_nccl() == pinned
    assert session.run(_Job(run)) == 9
    assert f"and {mpi_image} records NCCL {pinned}" in capsys.readouterr().out


@pytest.mark.parametrize("launcher", [
    ["mpirun", "--hosts", "localhost:1"],
    ["slurm", "-N", "1", "--submit"],
    ["inside-out", "-N", "1"],
])
def test_a_bad_gate_fails_before_the_image_is_read(launcher, tmp_path, monkeypatch):
    """The gate's error is the first and only thing said: the image (which does not exist) is not read,
    and nothing about its environment or preflight comes before it."""
    def read(image):
        raise AssertionError(f"the image was read before the gates: {image}")

    monkeypatch.setattr(reader, "read_or_reason", read)
    result = CliRunner().invoke(main, ["launch", *launcher, "--image", str(tmp_path / "gone.sqsh"), "--validate",
                                       "--small-size", "1Q", "--", "true"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("imagekit: error: --small-size: "), result.output
    assert "gone.sqsh" not in result.output
