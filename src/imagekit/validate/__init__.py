"""Validate nccl-tests / MPI benchmark output: parse into dataclasses, judge against gates.

    >>> from imagekit.validate import parse, evaluate, Gates
    >>> result = parse(open("all_reduce.log").read())          # doctest: +SKIP
    >>> verdict = evaluate(result, Gates(min_busbw=100))        # doctest: +SKIP
    >>> verdict.status, verdict.exit_code                       # doctest: +SKIP
    ('pass', 0)
    >>> verdict = evaluate(result, Gates(system=load_system("dgx-h100")))  # doctest: +SKIP
    >>> verdict.outcome, verdict.expectations[0]["expected_busbw"]        # doctest: +SKIP
    ('slow', 370.8)
"""

from imagekit.validate.baseline import Baseline, Limits, SizeLimit, baseline_from_dict, load_baseline
from imagekit.validate.gates import GateOptions, Gates
from imagekit.validate.judge import evaluate
from imagekit.validate.model import (Failure, Measurement, MpiBenchRun, MpiPoint, NcclTestsRun, RankInfo, Result,
                                     Row, TransportInfo, Verdict)
from imagekit.validate.parse import merge, parse
from imagekit.validate.system import System
from imagekit.validate.system import load as load_system
from imagekit.validate.report import to_json, to_text

__all__ = [
    "Baseline", "Failure", "GateOptions", "Gates", "Limits", "Measurement", "MpiBenchRun", "MpiPoint", "NcclTestsRun", "RankInfo",
    "Result", "Row", "SizeLimit", "TransportInfo", "Verdict", "baseline_from_dict", "evaluate", "load_baseline",
    "System", "load_system", "merge", "parse", "to_json", "to_text",
]
