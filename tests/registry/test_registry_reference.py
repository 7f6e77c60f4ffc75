"""Reference forms Pyxis and Enroot pass (Enroot's docker::_parse_uri), and the referrers tag."""

from __future__ import annotations

import pytest

from imagekit.util.errors import UsageError
from imagekit.registry import parse, referrers_tag

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text, registry, repo, tag, digest, user", [
    ("docker://nvcr.io#nvidia/pytorch:25.06-py3", "nvcr.io", "nvidia/pytorch", "25.06-py3", None, None),
    ("docker://$oauthtoken@nvcr.io#nvidia/pytorch:25.06-py3", "nvcr.io", "nvidia/pytorch", "25.06-py3", None,
     "$oauthtoken"),
    (f"docker://user@127.0.0.1:5000#hpc/mpi@{D}", "127.0.0.1:5000", "hpc/mpi", "latest", D, "user"),
    (f"docker://reg.example.org#hpc/mpi:1@{D}", "reg.example.org", "hpc/mpi", "1", D, None),
    ("docker://reg.example.org:5000/hpc/mpi:1", "reg.example.org:5000", "hpc/mpi", "1", None, None),
    ("docker://user@reg.example.org/hpc/mpi", "reg.example.org", "hpc/mpi", "latest", None, "user"),
    # Enroot: a first component without "." or ":" is a Docker Hub namespace.
    ("docker://nvidia/cuda:12.4.1-base", "registry-1.docker.io", "nvidia/cuda", "12.4.1-base", None, None),
    ("docker://localhost/x", "registry-1.docker.io", "localhost/x", "latest", None, None),
    ("docker://ubuntu", "registry-1.docker.io", "library/ubuntu", "latest", None, None),
    (f"docker://ubuntu@{D}", "registry-1.docker.io", "library/ubuntu", "latest", D, None),
    ("docker://docker.io#ubuntu:24.04", "registry-1.docker.io", "library/ubuntu", "24.04", None, None),
    # Without the scheme: what users give srun --container-image, and the Docker CLI's forms.
    ("127.0.0.1:5000#hpc/mpi:1.0", "127.0.0.1:5000", "hpc/mpi", "1.0", None, None),
    ("127.0.0.1:5000/hpc/mpi:1.0", "127.0.0.1:5000", "hpc/mpi", "1.0", None, None),
    ("localhost/x", "localhost", "x", "latest", None, None),
    (f"hpc/mpi@{D}", "registry-1.docker.io", "hpc/mpi", "latest", D, None),
    ("[::1]:5000#a/b:c", "[::1]:5000", "a/b", "c", None, None),
])
def test_reference_forms(text, registry, repo, tag, digest, user):
    ref = parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest, ref.user) == (registry, repo, tag, digest, user)


def test_pinned_and_pyxis_forms():
    ref = parse("127.0.0.1:5000/hpc/mpi:1.0")
    assert ref.pyxis == "127.0.0.1:5000#hpc/mpi:1.0"
    assert ref.with_digest(D).docker == f"127.0.0.1:5000/hpc/mpi@{D}"
    assert ref.with_digest(D).reference == D


@pytest.mark.parametrize("text, words", [
    ("dockerd://imagekit/debian-mpi", "dockerd:// scheme is not a registry"),
    ("127.0.0.1:5000#Hpc/MPI:1", "bad repository name"),
    ("127.0.0.1:5000#hpc/mpi@sha256:abc", "is not a sha256 digest"),
    ("127.0.0.1:5000#hpc/mpi:bad tag", "bad tag"),
    ("a/b#c:1", "is not a registry"),
    ("", "empty"),
])
def test_bad_references_name_the_reference_and_the_valid_forms(text, words):
    with pytest.raises(UsageError) as info:
        parse(text)
    assert words in str(info.value)
    assert "valid forms" in str(info.value) and info.value.exit_code == 2


def test_referrers_tag_follows_the_spec_table():
    # The three rows of distribution-spec 1.1's "Referrers Tag Schema" table.
    assert referrers_tag("sha256:" + "a" * 64) == "sha256-" + "a" * 64
    assert referrers_tag("sha512:" + "a" * 128) == "sha512-" + "a" * 64
    odd = ("test+algorithm+using+algorithm+separators+and+lots+of+characters+to+excercise+overall+truncation:"
           "alsoSome=InTheEncodedSectionToShowHyphenReplacementAndLotsAndLotsOfCharactersToExcerciseEncodedTruncation")
    assert referrers_tag(odd) == ("test-algorithm-using-algorithm-s-"
                                  "alsoSome-InTheEncodedSectionToShowHyphenReplacementAndLotsAndLot")
