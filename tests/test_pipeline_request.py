"""``pipeline.PipelineRequest``: exports are checked when the request is made, so a bad format or preset
costs no build (tests/test_pipeline.py holds the CLI's `--export enrot` against a real engine)."""

import pytest

from imagekit.build import BuildRequest
from imagekit.util.errors import UsageError
from imagekit.export import ExportRequest
from imagekit.pipeline import PipelineRequest


def test_export_names_become_requests_that_replace_their_outputs(tmp_path):
    r = PipelineRequest("debian-mpi", exports=("enroot", ExportRequest("sif", preset="zstd")),
                        output_dir=str(tmp_path))
    assert [(e.format, e.preset, e.force) for e in r.exports] == [("enroot", "fast", True), ("sif", "zstd", False)]
    assert r.output_dir == tmp_path and r.build == BuildRequest()


@pytest.mark.parametrize("exports, message", [
    (("enroot", "enrot"), "unknown export format 'enrot'"),
    (("sif", ExportRequest("enroot", preset="fast")), None),
])
def test_a_bad_export_fails_when_the_request_is_made(exports, message):
    if message is None:   # the same call with good exports goes through: the refusal is the format's
        assert len(PipelineRequest("debian-mpi", exports=exports).exports) == 2
        return
    with pytest.raises(UsageError, match=message):
        PipelineRequest("debian-mpi", exports=exports)
