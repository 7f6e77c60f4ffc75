"""Reading a site's Enroot configuration as ``enroot import`` reads it (imagekit.registry.enroot_config).

The files are made by each test under tmp_path and named through ``IMAGEKIT_ENROOT_CONF``; the
values go through the real shell. tests/export/test_pyxis_site_config.py runs the importer with the
machine's own /etc/enroot under the real Pyxis.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagekit.util.errors import UsageError
from imagekit.registry import enroot_config
from imagekit.registry.enroot_config import CONF_ENV, parse_line, read, site_environment


def conf(tmp_path: Path, main: str, **drop_ins: str) -> dict[str, str]:
    """An enroot.conf and its drop-ins; the environment that names them (HOME set, nothing else)."""
    path = tmp_path / "enroot.conf"
    path.write_text(main)
    if drop_ins:
        (tmp_path / "enroot.conf.d").mkdir()
        for name, text in drop_ins.items():
            (tmp_path / "enroot.conf.d" / f"{name}.conf").write_text(text)
    return {CONF_ENV: str(path), "HOME": "/home/job", "PATH": "/usr/bin:/bin"}


@pytest.mark.parametrize("line, parsed", [
    ("ENROOT_ALLOW_HTTP yes", ("ENROOT_ALLOW_HTTP", "yes")),
    ("ENROOT_ALLOW_HTTP=yes", ("ENROOT_ALLOW_HTTP", "yes")),
    ("  ENROOT_ALLOW_HTTP \t = yes  ", ("ENROOT_ALLOW_HTTP", "yes")),
    ("ENROOT_CONFIG_PATH ${HOME}/.config/enroot", ("ENROOT_CONFIG_PATH", "${HOME}/.config/enroot")),
    ('SSL_CERT_FILE "/a b/ca.pem"', ("SSL_CERT_FILE", '"/a b/ca.pem"')),
    ("#ENROOT_ALLOW_HTTP yes", ("#ENROOT_ALLOW_HTTP", "yes")),
    ("ENROOT_ALLOW_HTTP", ("ENROOT_ALLOW_HTTP", "")),
    ("", None), ("   ", None),
])
def test_a_line_splits_as_enroots_read_does(line, parsed):
    assert parse_line(line) == parsed


def test_only_the_settings_that_change_a_pull_are_read_and_comments_are_not(tmp_path):
    env = conf(tmp_path, "# ENROOT_ALLOW_HTTP yes\n#ENROOT_CONFIG_PATH /nowhere\nENROOT_SQUASH_OPTIONS -comp xz\n"
                         "ENROOT_ALLOW_HTTP yes\nhttps_proxy http://proxy.example:3128\nOTHER x\n")
    assert read(env) == {"ENROOT_ALLOW_HTTP": "yes", "https_proxy": "http://proxy.example:3128"}


def test_values_go_through_the_shell_as_the_jobs_user(tmp_path):
    env = conf(tmp_path, 'ENROOT_CONFIG_PATH ${HOME}/creds/$(id -u)\nSSL_CERT_FILE "/etc/a  b.pem"\n'
                         "no_proxy $NOT_SET_ANYWHERE\n")
    assert read(env) == {"ENROOT_CONFIG_PATH": f"/home/job/creds/{os.getuid()}",
                         # `eval echo` joins the words with one blank, as Enroot's value is
                         "SSL_CERT_FILE": "/etc/a  b.pem", "no_proxy": ""}


def test_the_environment_wins_then_the_first_file_that_sets_a_name(tmp_path):
    env = conf(tmp_path, "ENROOT_CONFIG_PATH /from/enroot.conf\n",
               **{"10-site": "ENROOT_CONFIG_PATH /from/10\nENROOT_ALLOW_HTTP yes\n",
                  "20-later": "ENROOT_ALLOW_HTTP no\nhttp_proxy http://p:1\n"})
    assert read(env) == {"ENROOT_CONFIG_PATH": "/from/enroot.conf", "ENROOT_ALLOW_HTTP": "yes",
                         "http_proxy": "http://p:1"}
    assert "ENROOT_CONFIG_PATH" not in read({**env, "ENROOT_CONFIG_PATH": "/from/job"})
    # An empty value in the environment counts as unset, as ${NAME:-…} does.
    assert read({**env, "ENROOT_CONFIG_PATH": ""})["ENROOT_CONFIG_PATH"] == "/from/enroot.conf"


def test_drop_ins_are_read_in_name_order_and_only_conf_files(tmp_path):
    env = conf(tmp_path, "", **{"20-b": "http_proxy http://b:1\n", "10-a": "http_proxy http://a:1\n"})
    (tmp_path / "enroot.conf.d" / "05-ignored.conf.disabled").write_text("http_proxy http://c:1\n")
    assert read(env) == {"http_proxy": "http://a:1"}


@pytest.mark.parametrize("word", ["n", "no", "N", "NO", "f", "false", "F", "FALSE"])
def test_a_false_word_leaves_enroot_allow_http_unset(tmp_path, word):
    env = conf(tmp_path, f"ENROOT_ALLOW_HTTP {word}\n")
    assert read(env) == {}
    assert "ENROOT_ALLOW_HTTP" not in site_environment(env)


def test_a_file_others_may_write_is_not_run_and_says_why(tmp_path):
    env = conf(tmp_path, "", **{"50-open": "ENROOT_CONFIG_PATH $(touch " + str(tmp_path / "ran") + ")\n"})
    (tmp_path / "enroot.conf.d" / "50-open.conf").chmod(0o666)
    said = []
    assert read(env, said.append) == {}
    assert not (tmp_path / "ran").exists()
    assert said == [f"not reading Enroot's configuration {tmp_path}/enroot.conf.d/50-open.conf: others may write it"]


def test_a_value_the_shell_cannot_expand_names_its_file_and_line(tmp_path):
    env = conf(tmp_path, "# site\nENROOT_CONFIG_PATH $(exit 3)x\"\n")
    with pytest.raises(UsageError) as err:
        read(env)
    assert f"{tmp_path}/enroot.conf:2: ENROOT_CONFIG_PATH: the shell could not expand" in err.value.message


def test_no_configuration_at_all_adds_nothing(tmp_path):
    env = {CONF_ENV: str(tmp_path / "missing" / "enroot.conf"), "HOME": "/home/job"}
    assert site_environment(env) == env


def test_the_default_file_is_enroots_own():
    assert enroot_config.conf_file({}) == Path("/etc/enroot/enroot.conf")
