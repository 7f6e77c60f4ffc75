"""``imagekit launch``'s CLI glue: what `--validate` prints, and what `cleanup` removes."""

from __future__ import annotations


import pytest


from imagekit.launch.session import LaunchRequest, Session  # noqa: E402
from imagekit.validate import GateOptions, Gates  # noqa: E402
from helpers.validate_gen import Spec, nccl_tests_output  # noqa: E402


class _Job:
    """A Launcher (imagekit.launch.launcher) whose job is the test's function: no job is started."""

    name = "test"

    def __init__(self, fn) -> None:
        self.run = fn


def _run_validated(run, gates: dict) -> int:
    """What `launch … --validate` does with the job's output (no image: its facts are not needed here)."""
    request = LaunchRequest("imagekit-test/none:0", command=("true",), gates=Gates.load(GateOptions(**gates)))
    return Session(request, log=print, echo=lambda text: print(text, end=""), facts=None).run(_Job(run))


def test_validate_prints_with_the_baselines_small_size_and_saturation(tmp_path, capsys):
    """The verdict already used a baseline's small_size and saturation_fraction; the printed summary
    must describe the same sizes (it used the command-line defaults)."""
    run_text, _ = nccl_tests_output(Spec(style="new", hosts=("node-a", "node-b"), check=False))
    baseline = tmp_path / "base.yaml"
    baseline.write_text("small_size: 64K\nsaturation_fraction: 0.5\n")

    def run(stdout) -> int:
        stdout.write(run_text)
        return 0

    gates = dict(min_busbw=None, max_latency_us=None, expect_transport=(), baseline=str(baseline),
                 collective=None, small_size="1K", saturation=0.9)
    assert _run_validated(run, gates) == 0
    out = capsys.readouterr().out
    assert "busbw >= 50% of peak" in out and "90% of peak" not in out


@pytest.mark.engine
def test_cleanup_removes_the_jobs_containers_and_network_and_nothing_else(base_image):
    """`imagekit launch cleanup --job ID`: what a killed launcher left for that job, no other job's."""
    import uuid

    from click.testing import CliRunner

    from imagekit.util import leases
    from imagekit.engines import docker as engine
    from imagekit.cli import main
    from imagekit.launch.common import JOB_LABEL

    client = engine.client()
    job, other = f"iktest{uuid.uuid4().hex[:8]}", f"iktest{uuid.uuid4().hex[:8]}"
    made = [client.containers.create(base_image, labels={JOB_LABEL: j, **leases.labels()}) for j in (job, job, other)]
    nets = [client.networks.create(f"imagekit-{j}", labels={JOB_LABEL: j, **leases.labels()}) for j in (job, other)]
    try:
        result = CliRunner().invoke(main, ["launch", "cleanup", "--job", job])
        assert result.exit_code == 0 and "removed 3 object(s)" in result.output
        mine = {"label": f"{leases.LABEL}={leases.me()}"}    # not other runs' jobs on the same engine
        left = {c.id for c in client.containers.list(all=True, filters=mine, sparse=True)}
        left_nets = {n.id for n in client.networks.list(filters=mine)}
        assert {c.id for c in made} & left == {made[2].id} and {n.id for n in nets} & left_nets == {nets[1].id}
    finally:
        engine.remove_labelled(JOB_LABEL, other)
        engine.remove_labelled(JOB_LABEL, job)


@pytest.mark.parametrize("peak, code", [(372, 0), (300, 1)])
def test_validate_takes_a_system_model(capsys, peak, code):
    """`launch … --validate --system NAME`: the job's output is judged against the model's band; the exit code
    is the verdict's (1: ran right but slow)."""
    from helpers.validate_gen import nccl_log

    hosts = ("gpu-01", "gpu-02")
    run_text, _ = nccl_tests_output(Spec(style="new", hosts=hosts, check=False, peak_busbw=peak))

    def run(stdout) -> int:
        stdout.write(run_text + nccl_log("GDRDMA", hosts=hosts, gpus=8, env_algo="Ring"))
        return 0

    gates = dict(min_busbw=None, max_latency_us=None, expect_transport=(), baseline=None, collective=None,
                 small_size="1K", saturation=0.9, system="dgx-h100")
    assert _run_validated(run, gates) == code
    out = capsys.readouterr().out
    assert "of what 2 x 8 H100 with 8 x NDR (dgx-h100) should reach" in out
