"""Site components: one module in a site directory, or one named by a Python entry point.

They are discovered like the shipped ones, keep the same contract, reach `imagekit show`, the
recipe and the labels, and an image built with one is checked with its checks. The entry point
test installs a distribution the way pip lays one out (a ``.dist-info`` with ``entry_points.txt``)
on PYTHONPATH and runs the real ``imagekit`` command; the build test builds a real image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click.testing
import pytest
from click.testing import CliRunner

from helpers.added_alone import assert_site_component_alone
from helpers.users import BOB
from imagekit import cli, image_facts, render
from imagekit.engines import docker as engine
from imagekit import stack as stack_mod
from imagekit.build import BuildRequest, build
from imagekit.checks import runner
from imagekit.components import contract_problems, registry
from imagekit.util.errors import StackError

TOOLS = '''\
"""Site tools: htop from the distro, in both stages."""
from imagekit import checks
from imagekit.components import Component
from imagekit.util.schema import Option


class SiteTools(Component):
    name = "site-tools"
    summary = "htop and friends from the distro"
    order = 90
    sources = ("distro",)
    distro_versions = {"debian12": "3.2.2"}
    distro_packages = ("htop",)
    options = {"motd": Option(str, "", "a line for /etc/motd")}

    def labels(self):
        return {"motd": self.opts["motd"]}

    def checks(self):
        return [checks.file("site-tools.htop", "/usr/bin/htop")]
'''
STACK = """\
name: ik-ux-site
base: {image: imagekit/debian:bookworm, distro: debian12}
components:
  site-tools: {motd: hello}
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site directory: stacks at its top, components/ beside them, on the search path."""
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "site_tools.py").write_text(TOOLS)
    (tmp_path / "ik-ux-site.yaml").write_text(STACK)
    monkeypatch.setenv("IMAGEKIT_STACKS_PATH", str(tmp_path))
    yield tmp_path
    monkeypatch.delenv("IMAGEKIT_STACKS_PATH")
    registry()   # forget this site's components for the tests that follow


def test_a_site_component_is_found_shown_rendered_and_labelled(site):
    assert_site_component_alone(site / "components" / "site_tools.py", "site-tools")
    result = CliRunner().invoke(cli.main, ["show", "ik-ux-site", "--json"], prog_name="imagekit")
    assert result.exit_code == 0, result.output
    comp = json.loads(result.output)["components"][0]
    assert comp["name"] == "site-tools" and comp["motd"] == "hello"
    assert comp["origin"].startswith("site_tools.py sha256:")
    assert "site-tools.htop" in [c["id"] for c in json.loads(result.output)["checks"]]
    text = render.render(stack_mod.load("ik-ux-site"))
    assert "apt-get install -y --no-install-recommends htop" in text
    assert 'io.imagekit.component.site-tools.origin="site_tools.py sha256:' in text
    assert 'io.imagekit.component.site-tools.motd="hello"' in text


def test_its_options_are_checked_like_a_shipped_ones(site):
    (site / "ik-ux-site.yaml").write_text(STACK.replace("motd:", "mtod:"))
    with pytest.raises(StackError) as info:
        stack_mod.load("ik-ux-site")
    assert (info.value.line, info.value.key) == (4, "components.site-tools.mtod")
    assert "did you mean 'motd'" in str(info.value)


@pytest.mark.parametrize("edit, fragments", [
    (lambda t: t.replace('summary = "htop and friends from the distro"', 'summary = ""'),
     ["breaks the component contract", "`summary` is empty"]),
    (lambda t: t.replace('order = 90', 'order = 90\n    provides = ("hdf5",)'), ["role 'hdf5' is not one of"]),
    (lambda t: t.replace('"a line for /etc/motd"', '""'), ["option 'motd' has no help"]),
    (lambda t: t.replace('name = "site-tools"', 'name = "openmpi"'),
     ["has the name of another component (shipped with imagekit)", "rename it"]),
    (lambda t: t.replace("from imagekit import checks", "from imagekit import chekcs"),
     ["site_tools.py:2: fails to import: ImportError"]),
    (lambda t: "X = 1\n", ["defines no component"]),
])
def test_a_broken_site_component_is_one_clear_error(site, edit, fragments):
    path = site / "components" / "site_tools.py"
    path.write_text(edit(TOOLS))
    result = CliRunner().invoke(cli.main, ["show", "ik-ux-site"], prog_name="imagekit")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("imagekit: error: ")
    assert len(result.output.strip().splitlines()) <= 2, result.output
    for fragment in fragments:
        assert fragment in result.output


def test_the_contract_check_catches_what_the_shipped_ones_keep():
    for name, cls in registry().items():
        assert contract_problems(cls) == [], name


def installed(site_packages: Path, module: str) -> dict[str, str]:
    """A distribution as pip lays one out in ``site_packages``, whose entry_points.txt names ``module``'s
    text as acme_imagekit.tools under imagekit.components: the environment that puts it on the path."""
    (site_packages / "acme_imagekit").mkdir(parents=True)
    (site_packages / "acme_imagekit" / "__init__.py").write_text("")
    (site_packages / "acme_imagekit" / "tools.py").write_text(module)
    info = site_packages / "acme_imagekit-1.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-imagekit\nVersion: 1.2.0\n")
    (info / "entry_points.txt").write_text("[imagekit.components]\nacme-tools = acme_imagekit.tools\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site_packages), os.environ.get("PYTHONPATH", "")])}


def test_an_entry_point_names_a_site_module_which_runs_only_for_a_stack_that_uses_it(tmp_path):
    """An installed distribution whose entry_points.txt names the module under imagekit.components: the
    module runs for a stack that names its component (security-4 H10), not for `show` of a shipped
    stack. The module writes a marker when it runs."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = installed(tmp_path / "site-packages", marked(marks).replace("site-tools", "acme-tools"))
    stack = tmp_path / "s.yaml"
    stack.write_text(STACK.replace("site-tools", "acme-tools"))
    proc = subprocess.run([sys.executable, "-m", "imagekit", "show", "debian-mpi"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert list(marks.iterdir()) == [], "imagekit show debian-mpi ran the site module"
    proc = subprocess.run([sys.executable, "-m", "imagekit", "show", str(stack), "--json"], capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    comp = json.loads(proc.stdout)["components"][0]
    assert comp["name"] == "acme-tools"
    assert comp["origin"] == "entry point acme_imagekit.tools (acme-imagekit 1.2.0)"
    assert [p.name for p in marks.iterdir()] == [f"imported-{os.getuid()}"]


@pytest.mark.engine
def test_an_image_built_with_a_site_component_carries_and_passes_its_checks(site, base_image, tmp_path):
    """Builds a small image (the base plus htop) with the site component alone, then runs its checks."""
    s = stack_mod.load("ik-ux-site")
    result = build(s, BuildRequest(log_dir=tmp_path / "logs"))
    labels = engine.inspect(result.image_id).labels
    facts = image_facts.from_labels(labels)
    assert facts.components["site-tools"].fact("origin").startswith("site_tools.py sha256:")
    assert facts.components["site-tools"].fact("motd") == "hello"
    report = runner.run(result.tags[0], runner.checks_from_image(result.tags[0]))
    outcome = {o.id: o.status for o in report.outcomes}
    assert outcome["site-tools.htop"] == "passed" and report.ok, report.as_dict()


# Security-4 H10: a site component is code imagekit runs (as root in CI). It runs only for a stack that
# names it, and another user's, or one in a directory others can write, is refused before it is
# imported. The module writes a marker when it runs.


def marked(marks: Path) -> str:
    return f"import os\nopen(os.path.join({str(marks)!r}, 'imported-' + str(os.getuid())), 'w').close()\n" + TOOLS


def hostile_site(root: Path) -> tuple[Path, Path]:
    """(a stack directory whose components/ holds a marked site_tools.py, with the red team's stack that
    names no site component and one that uses site-tools; the directory its markers go to)."""
    site, marks = root / "site", root / "marks"
    (site / "components").mkdir(parents=True)
    marks.mkdir()
    site.chmod(0o755)
    (site / "components" / "site_tools.py").write_text(marked(marks))
    (site / "mystack.yaml").write_text("name: mystack\nbase: {image: imagekit/debian:bookworm, distro: debian12}\n")
    (site / "ik-ux-site.yaml").write_text(STACK)
    return site, marks


def run_on(site: Path, how: str, args: list[str], monkeypatch) -> "click.testing.Result":
    """``imagekit ARGS`` in this process with ``site`` on the search path (``how``), forgotten afterwards."""
    monkeypatch.delenv("IMAGEKIT_STACKS_PATH", raising=False)
    if how == "--stacks-dir":
        args = ["--stacks-dir", str(site), *args]
    else:
        monkeypatch.setenv("IMAGEKIT_STACKS_PATH", str(site))
    try:
        return CliRunner().invoke(cli.main, args, prog_name="imagekit")
    finally:
        monkeypatch.delenv("IMAGEKIT_STACKS_PATH", raising=False)
        registry()


@pytest.mark.parametrize("how", ["--stacks-dir", "IMAGEKIT_STACKS_PATH"])
def test_h10_a_site_component_runs_only_for_a_stack_that_uses_it(how, tmp_path, monkeypatch):
    """The red team's `show debian-mpi` with a site components/ on the path runs none of it, nor does
    `render` of it or `show` of a site stack that names no site component; `show` of the site's stack
    that names the component still gets it, shown and imported once. (`imagekit stacks` loads every
    stack on the path, so it runs the modules the site's stacks name, and only those.)"""
    site, marks = hostile_site(tmp_path)
    (site / "ik-ux-site.yaml").rename(site / "ik-ux-site.later")
    for args in (["show", "debian-mpi"], ["stacks"], ["render", "debian-mpi"], ["show", "mystack"]):
        result = run_on(site, how, args, monkeypatch)
        assert result.exit_code == 0, result.output
        assert list(marks.iterdir()) == [], f"imagekit {' '.join(args)} ran the site module"
    (site / "ik-ux-site.later").rename(site / "ik-ux-site.yaml")
    result = run_on(site, how, ["show", "ik-ux-site", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["components"][0]["origin"].startswith("site_tools.py sha256:")
    assert [p.name for p in marks.iterdir()] == [f"imported-{os.getuid()}"]


def test_h10_a_site_module_is_found_by_its_name_and_must_define_that_component(site):
    """The name a module is found by is its file's: one that defines another component is refused when
    a stack names it, and a module of another name is never run for it."""
    (site / "components" / "site_tools.py").rename(site / "components" / "tools.py")
    with pytest.raises(StackError, match="components.site-tools: unknown key") as info:
        stack_mod.load("ik-ux-site")
    assert "did you mean 'tools'?" in str(info.value.hint)
    (site / "components" / "tools.py").rename(site / "components" / "site_extra.py")
    (site / "ik-ux-site.yaml").write_text(STACK.replace("site-tools: {motd: hello}", "site-extra: {}"))
    result = CliRunner().invoke(cli.main, ["show", "ik-ux-site"], prog_name="imagekit")
    assert result.exit_code == 2, result.output
    assert "must define one component, 'site-extra' (the name it is found by); it defines 'site-tools'" in \
        result.output, result.output


OPENINGS = {
    "components/ writable by everyone": lambda d: (d / "components").chmod(0o777),
    "the module another user's": lambda d: os.chown(d / "components" / "site_tools.py", BOB, BOB),
    "the stack directory writable by its group": lambda d: d.chmod(0o775) or os.chown(d, 0, BOB),
}


@pytest.mark.parametrize("how", ["--stacks-dir", "IMAGEKIT_STACKS_PATH"])
@pytest.mark.parametrize("opening", OPENINGS)
def test_h10_a_site_component_someone_else_can_change_is_refused_unimported(opening, how, tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    site, marks = hostile_site(tmp_path)
    OPENINGS[opening](site)
    result = run_on(site, how, ["show", "ik-ux-site"], monkeypatch)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("imagekit: error: site component ") and "is not used" in result.output
    assert len(result.output.strip().splitlines()) <= 2, result.output
    assert list(marks.iterdir()) == []


def test_h10_an_entry_point_module_in_a_directory_others_can_write_is_refused_unimported(tmp_path):
    """The imagekit.components entry point (an untried surface of security-4): a distribution on the path
    in a directory everyone can write (a shared --target install, a job's directory under python -m)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = installed(tmp_path / "site-packages", marked(marks).replace("site-tools", "acme-tools"))
    (tmp_path / "site-packages").chmod(0o777)
    stack = tmp_path / "s.yaml"
    stack.write_text(STACK.replace("site-tools", "acme-tools"))
    proc = subprocess.run([sys.executable, "-m", "imagekit", "show", str(stack)], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "site component entry point acme_imagekit.tools (acme-imagekit 1.2.0)" in proc.stderr, proc.stderr
    assert "site-packages is writable by everyone" in proc.stderr, proc.stderr
    assert list(marks.iterdir()) == []
