"""`imagekit stacks --outdated`: each pin against what the package index and the site mirror serve."""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner

from imagekit import stack as stack_mod
from imagekit import versions
from imagekit.cli import main

STACK = """\
name: small
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  nccl: {source: pypi, version: "2.21.5", cuda: "12"}
  python:
    pip: ["mpi4py==%s"]
"""


@pytest.fixture
def stub_index(tmp_path, monkeypatch):
    """A local PEP 503 simple index (file://), made here, as pip's only configured index: it serves
    nvidia-nccl-cu12 2.21.5 and 2.28.9 and mpi4py 4.0.1. No network: this is the offline test."""
    root = tmp_path / "simple"
    for name, files in {"nvidia-nccl-cu12": ["nvidia_nccl_cu12-2.21.5-py3-none-any.whl",
                                             "nvidia_nccl_cu12-2.28.9-py3-none-any.whl"],
                        "mpi4py": ["mpi4py-4.0.1-py3-none-any.whl"]}.items():
        (root / name).mkdir(parents=True)
        (root / name / "index.html").write_text(
            "<html><body>" + "".join(f'<a href="../../files/{f}">{f}</a>' for f in files) + "</body></html>")
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip reads no config file: only this index
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    monkeypatch.setattr(versions, "_INDEX_CACHE", {})
    return root


def test_outdated_compares_each_pin_with_the_stub_index(stub_index, write_stack):
    path = write_stack(STACK % "4.0.1")
    result = CliRunner().invoke(main, ["stacks", "--outdated", "--json", str(path)])
    assert result.exit_code == 0, result.output
    rows = {r["component"] + ":" + r["package"]: r for r in json.loads(result.stdout)}
    nccl = rows["nccl:nvidia-nccl-cu12"]
    assert (nccl["pinned"], nccl["newest"], nccl["behind"], nccl["where"]) == ("2.21.5", "2.28.9", "yes", "package index")
    assert nccl["line"] == 4 and nccl["key"] == "components.nccl.version"
    assert (rows["python:mpi4py"]["newest"], rows["python:mpi4py"]["behind"]) == ("4.0.1", "no")
    text = CliRunner().invoke(main, ["stacks", "--outdated", str(path)]).stdout
    assert "small\n" in text and "nccl          2.21.5     2.28.9     yes" in text


def test_a_pin_the_index_does_not_serve_is_one_error_naming_file_line_and_key(stub_index, write_stack):
    path = write_stack(STACK % "9.9.9")
    result = CliRunner().invoke(main, ["stacks", "--outdated", str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("imagekit: error:") == 1
    assert f"{path}:6: components.python.pip: the package index does not serve mpi4py 9.9.9 (newest: 4.0.1)" \
        in result.stderr


def test_an_nccl_wheel_pypi_does_not_publish_is_refused_at_load_before_any_build(write_stack):
    path = write_stack(STACK.replace("2.21.5", "2.99.1") % "4.0.1")
    result = CliRunner().invoke(main, ["render", str(path)])
    assert result.exit_code == 2
    assert f"{path}:4: components.nccl.version: PyPI has no nvidia-nccl-cu12 2.99.1" in result.stderr


def test_upstream_pins_against_the_site_mirror_listing(site_mirror, write_stack, monkeypatch):
    monkeypatch.setattr(versions, "served", lambda package: [])  # only the mirror is asked here
    path = write_stack("""\
name: mpi
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  pmix: {version: "4.2.2"}
  ucx: {version: "1.13.1", ofed: false}
""")
    rows = {r.component: r for r in versions.report(stack_mod.load_all(path), str(site_mirror))}
    assert (rows["pmix"].newest, rows["pmix"].behind, rows["pmix"].where) == ("5.0.10", "yes", "site mirror")
    assert (rows["ucx"].newest, rows["ucx"].behind) == ("1.20.1", "yes")
    without = {r.component: r for r in versions.report(stack_mod.load_all(path))}
    assert without["pmix"].where == "imagekit pins" and without["pmix"].newest == "5.0.10"


def test_outdated_against_the_real_package_index(write_stack, monkeypatch):
    """For real: pip's configured index (PyPI here) serves newer NCCL wheels than 2.21.5 (2024)."""
    monkeypatch.setattr(versions, "_INDEX_CACHE", {})
    path = write_stack(STACK % "4.0.1")
    result = CliRunner().invoke(main, ["stacks", "--outdated", "--json", str(path)])
    assert result.exit_code == 0, result.output
    nccl = next(r for r in json.loads(result.stdout) if r["component"] == "nccl")
    from packaging.version import Version

    assert nccl["behind"] == "yes" and Version(nccl["newest"]) >= Version("2.32.3")


def test_imagekit_outdated_is_a_report_unless_strict(stub_index, write_stack):
    """CI prints `imagekit outdated` (exit 0 even when a pin lags or is not served); --strict is the gate."""
    path = write_stack(STACK % "9.9.9" + "  openmpi: {source: distro}\n  ucx: {source: distro, ofed: false}\n"
                       "  pmix: {source: distro}\n")
    report = CliRunner().invoke(main, ["outdated", str(path)])
    assert report.exit_code == 0, report.output
    assert "pins behind what is served or released upstream; 1 not served" in report.stdout
    # Debian 12's Open MPI against the newest upstream release imagekit pins.
    assert "openmpi       4.1.4" in report.stdout and "debian12 package" in report.stdout
    strict = CliRunner().invoke(main, ["outdated", "--strict", str(path)])
    assert strict.exit_code == 2 and "does not serve mpi4py 9.9.9" in strict.stderr


def test_base_images_are_listed_with_their_digest_state(stub_index, write_stack):
    digest = "sha256:" + "a" * 64
    path = write_stack(f"name: b\nbase:\n  image: nvidia/cuda:12.9.1-devel-ubuntu22.04@{digest}\n"
                       "  runtime: nvidia/cuda:12.9.1-base-ubuntu22.04\n  distro: ubuntu22\ncomponents:\n  cuda: {}\n")
    rows = {r["component"]: r for r in json.loads(CliRunner().invoke(main, ["outdated", "--json", str(path)]).stdout)}
    assert rows["base.image"]["where"] == "digest-pinned"
    assert rows["base.runtime"]["where"] == "tag only, not pinned by digest"


def test_h1_pip_runs_isolated_from_the_callers_directory_and_python_variables(stub_index, tmp_path, monkeypatch):
    """Security-4 H1 (attack 99): `imagekit outdated` run from a directory holding another user's
    ``pip/`` package, with PYTHONPATH (an empty entry: that directory), PYTHONSTARTUP, PYTHONINSPECT,
    PYTHONWARNINGS and PYTHONUSERBASE pointing into it. pip is imagekit's installed one: the stub
    index's versions come back and nothing planted runs (on ``python -m pip`` it did)."""
    planted, marks = tmp_path / "cwd", tmp_path / "marks"
    marks.mkdir()
    code = f"import os; open(os.path.join({str(marks)!r}, __name__), 'w').close()\n"
    for rel in ("pip/__init__.py", "runpy.py", "sitecustomize.py", "evilwarn.py", "startup.py",
                f"userbase/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/zz.pth"):
        (planted / rel).parent.mkdir(parents=True, exist_ok=True)
        (planted / rel).write_text(code + ("class W(Warning):\n    pass\n" if rel == "evilwarn.py" else ""))
    monkeypatch.chdir(planted)
    for name, value in {"PYTHONPATH": f"{planted}:", "PYTHONSTARTUP": str(planted / "startup.py"),
                        "PYTHONINSPECT": "1", "PYTHONWARNINGS": "ignore::evilwarn.W",
                        "PYTHONUSERBASE": str(planted / "userbase")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    assert versions.served("nvidia-nccl-cu12") == ["2.28.9", "2.21.5"]
    assert sorted(p.name for p in marks.iterdir()) == []


UCX = """\
name: ucx-only
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  ucx: {version: "1.20.1", ofed: false}
"""


def test_a_mirror_that_has_not_caught_up_does_not_make_a_pin_current(site_mirror, write_stack, monkeypatch):
    """J8: the stand-in mirror's newest UCX is 1.20.1; upstream released 1.22.0. The row says behind, and
    says that the upstream figure is imagekit's dated data, not something asked."""
    monkeypatch.setattr(versions, "served", lambda package: [])
    (row,) = versions.report(stack_mod.load_all(write_stack(UCX)), str(site_mirror))
    assert (row.newest, row.where, row.behind) == ("1.20.1", "site mirror", "yes")
    assert row.upstream == "1.22.0" and row.upstream_from.startswith("imagekit's upstream data (as of 2026-08")


@pytest.fixture
def feed(monkeypatch):
    """A local HTTP server answering as GitHub's releases API does (a JSON list of releases with tag_name,
    draft and prerelease): GitHub itself is out of reach here. Its URL becomes UCX's feed."""
    import http.server
    import threading

    body = json.dumps([{"tag_name": "v1.24.0-rc1", "draft": False, "prerelease": True},
                       {"tag_name": "v1.23.0", "draft": False, "prerelease": False},
                       {"tag_name": "v1.22.0", "draft": False, "prerelease": False}]).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    data = {**versions.upstream_data(), "releases": {**versions.upstream_data()["releases"]}}
    url = f"http://127.0.0.1:{server.server_port}/repos/openucx/ucx/releases"
    data["releases"]["ucx"] = {**data["releases"]["ucx"], "feed": url}
    monkeypatch.setattr(versions, "upstream_data", lambda: data)
    monkeypatch.setattr(versions, "_FEED_CACHE", {})
    monkeypatch.setattr(versions, "served", lambda package: [])
    yield data
    server.shutdown()


def test_upstream_is_asked_where_the_site_lets_it(feed, site_mirror, write_stack):
    stacks = stack_mod.load_all(write_stack(UCX))
    (asked,) = versions.report(stacks, str(site_mirror), upstream=True)
    assert (asked.upstream, asked.upstream_from, asked.behind) == ("1.23.0", "upstream's release feed", "yes")
    (data_only,) = versions.report(stacks, str(site_mirror))
    assert data_only.upstream == "1.22.0" and "--upstream asks" in data_only.upstream_from


def test_an_unreachable_upstream_is_said_and_the_dated_data_used(feed, site_mirror, write_stack):
    feed["releases"]["ucx"]["feed"] = "http://127.0.0.1:9/none"          # the discard port: refused
    result = CliRunner().invoke(main, ["outdated", "--upstream", "--mirror", str(site_mirror), str(write_stack(UCX))])
    assert result.exit_code == 0, result.output
    assert "upstream 1.22.0 from upstream not reachable (URLError): imagekit's upstream data (as of 2026-08)" \
        in result.stdout


def test_every_source_built_component_of_a_shipped_stack_has_upstream_data():
    from imagekit.components import registry

    known = versions.upstream_data()["releases"]
    used = {c.name for path, _ in stack_mod.available() for s in stack_mod.load_all(path)
            for c in s.components.values() if c.source == "upstream" and registry()[c.name].upstream_file}
    assert used - {"hpcx"} <= set(known), used - set(known)
