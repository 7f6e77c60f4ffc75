"""The stage step's settings as every node's importer reads them back (imagekit.export.stage_env)."""

from __future__ import annotations

import pytest

from imagekit.util.errors import UsageError
from imagekit.export import stage_env

ID = "sha256:" + "ab" * 32
JOB = {"IMAGEKIT_STAGE": "shared", "IMAGEKIT_STAGE_IMAGE": "docker://reg#hpc/mpi:1", "IMAGEKIT_STAGE_IMAGE_ID": ID,
       "IMAGEKIT_STAGE_SHA256": "cd" * 32}


def test_the_staged_image_is_pinned_as_pyxis_names_it_and_no_other():
    assert stage_env.pinned("reg#hpc/mpi:1", JOB) == ID                  # Pyxis adds docker://
    assert stage_env.pinned("docker://reg#hpc/mpi:1", JOB) == ID
    assert stage_env.pinned_entry("reg#hpc/mpi:1", JOB) == "cd" * 32
    assert stage_env.pinned("reg#hpc/other:1", JOB) is None, "another image of the job resolves as usual"
    assert stage_env.pinned_entry("reg#hpc/other:1", JOB) is None
    assert stage_env.pinned("reg#hpc/mpi:1", {}) is None
    assert stage_env.staged("reg#hpc/mpi:1", JOB, print) is None, "shared: no local copy"


@pytest.mark.parametrize("bad", ["", "sha256:xyz", "md5:" + "ab" * 16, ID + "\n"])
def test_a_pin_that_is_not_an_image_id_is_refused(bad):
    with pytest.raises(UsageError, match="is not an image ID"):
        stage_env.pinned("reg#hpc/mpi:1", {**JOB, "IMAGEKIT_STAGE_IMAGE_ID": bad})


def test_sbcast_needs_its_directory_and_digest():
    with pytest.raises(UsageError, match="needs IMAGEKIT_STAGE_DIR and IMAGEKIT_STAGE_SHA256"):
        stage_env.staged("reg#hpc/mpi:1", {**JOB, "IMAGEKIT_STAGE": "sbcast"}, print)
