"""One launch, whichever launcher runs it: the image's facts, the command, preflight, and ``--validate``.

Every launch goes through the same steps: read the image's facts once (for the benchmark choice and
for preflight), pick the command (the image's benchmark for a bare ``--validate``), run preflight,
then run the job, teeing its output into the validator when gates were given. They used to be
written out three times in the CLI, and one copy forgot what another did; here they are written once.
How a job is composed and delivered is :mod:`imagekit.launch.plan`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from imagekit.util.errors import UsageError
from imagekit.image_facts import BENCHMARK, ImageFacts, reader
from imagekit.launch import preflight as preflight_mod
from imagekit.launch.benchmark import Tee, default_benchmark
from imagekit.launch.common import check_image_command
from imagekit.launch.launcher import Launcher
from imagekit.launch.request import LaunchRequest
from imagekit.validate import Gates, Verdict, evaluate, parse, to_text

__all__ = ["LaunchRequest", "Session", "judge"]


_READ = object()


class Session:
    """A launch being prepared and run: ``facts``, ``command`` and ``benchmark_env`` (the image's environment for its own benchmark) are known once made.

    ``log`` hears progress (stderr in the CLI), ``echo`` the verdict (stdout). ``facts``: the image's,
    when the caller has them already (default: read here, once, if validation or preflight needs them).
    """

    def __init__(self, request: LaunchRequest, *, log: Callable[[str], None], echo: Callable[[str], None],
                 facts: "ImageFacts | None | object" = _READ) -> None:
        self.request, self.log, self.echo = request, log, echo
        if facts is _READ:   # once, for the benchmark choice, preflight and the image's NCCL alike
            facts = reader.read_or_reason(request.image) if request.validate or request.preflight else None
        self.facts: ImageFacts | None = facts
        self.command, self.benchmark_env = self._job_command()

    def _job_command(self) -> tuple[list[str], dict[str, str]]:
        """The command to run and the image's own environment for it: the image's benchmark for a bare
        --validate. That environment is the image's, not the user's: the launchers hand it to the
        containers only (the job's ``image_env``), never to a script or program on the host."""
        request = self.request
        if request.command or not request.validate:
            return list(request.command), {}
        facts = self.facts
        if facts is None or facts.labels is None:
            reason = facts.reason if facts is not None else "not read"
            raise UsageError(f"--validate without a command needs the image's labels (they name the benchmark): "
                             f"{reason}",
                             "give the benchmark after `--`, e.g. -- all_reduce_perf -b 8 -e 1G -f 2 -g 1")
        cmd, env = default_benchmark(facts)
        return check_image_command(request.image, cmd, BENCHMARK), env

    def preflight(self, plan: preflight_mod.PreflightPlan) -> None:
        """Preflight for this launch, unless turned off (--no-preflight)."""
        if self.request.preflight:
            preflight_mod.enforce(self.request.image, dataclasses.replace(plan, site=self.request.site), log=self.log,
                                  facts=self.facts)

    def image_nccl(self) -> str | None:
        """The NCCL the image's labels record, if they were read and record one."""
        facts = self.facts
        return (facts.role_version("nccl") or None) if facts is not None and facts.labels is not None else None

    def run(self, launcher: Launcher) -> int:
        """Run the job through ``launcher`` (its output on the terminal); the exit code CI should see.
        With gates, the output is also teed into the validator and the verdict printed."""
        if self.request.gates is None:
            return launcher.run(None)
        tee = Tee()
        try:
            rc = launcher.run(tee.file)
        finally:
            text = tee.close()
        verdict, report = judge(text, self.request.gates, image=self.request.image, image_nccl=self.image_nccl())
        self.echo(report)
        if rc != 0:
            self.log(f"imagekit: the job exited {rc}; the verdict above covers only what it printed")
            return rc
        return verdict.exit_code


def judge(text: str, gates: Gates, *, image: str | None = None,
          image_nccl: str | None = None, source: str = "<launch>") -> tuple[Verdict, str]:
    """Parse a job's output and judge it against ``gates``. The image's NCCL (``image_nccl``) is held
    against the NCCL the run loaded whenever the output says which (NCCL_DEBUG=INFO's 'NCCL version'
    line, as the image's benchmark prints it): another NCCL first on the loader path fails the run, as
    ``imagekit validate --image`` does. An nccl-tests run that does not say is noted, not failed: the
    user's own command may run without NCCL_DEBUG."""
    result = parse(text, source=source)
    loaded = result.transport.nccl_version
    if image_nccl and loaded and not gates.image_nccl:
        gates = dataclasses.replace(gates, image=image, image_nccl=image_nccl)
    verdict = evaluate(result, gates)
    if image_nccl and not loaded and result.nccl_tests:
        verdict.notes.append(f"the image's NCCL {image_nccl} was not checked against the run's: no 'NCCL version' "
                             "line (run with NCCL_DEBUG=INFO to check it)")
    return verdict, to_text(result, verdict, gates.effective_small_size, gates.effective_saturation, table=False)
