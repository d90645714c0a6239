"""The command line's view of the agents: the names its help lists and the options agents
add to ``image build`` come from the registry (a contract over every registered agent,
and an agent registered for the test)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import agents
from git_iterare.agents.base import Agent
from git_iterare.cli.main import run
from git_iterare.config import Config
from tests.conftest import iterare

MAN_IMAGE = Path(__file__).resolve().parent.parent / "man" / "git-iterare-image.1"
#: ``image build``'s own options, in the order its help shows them around the agents'.
BUILD_OWN = ["--base", "--ca-bundle", "--agents", "--no-cache", "--tag", "--color",
             "--verbose", "-h"]


def _words(text: str) -> str:
    """``text`` on one line: click wraps help to the terminal's width."""
    return " ".join(text.split())


def _listed(help_text: str, lead: str) -> list[str]:
    """The agents an ``--agent`` help lists after ``lead:`` (``a, b or c``)."""
    match = re.search(rf"{re.escape(lead)}: (.*?) \(default: run\.agent\)\.", _words(help_text))
    assert match, help_text
    return re.split(r", | or ", match.group(1))


def _options(help_text: str) -> list[str]:
    """The options a ``-h`` lists, in order (the first of each row)."""
    return re.findall(r"^  (?:-\w, )?(--?[\w-]+)", help_text, re.M)


@pytest.fixture(params=agents.names())
def agent(request: pytest.FixtureRequest) -> Agent:
    return agents.get_agent(request.param)


@pytest.fixture
def fake_image_build(monkeypatch: pytest.MonkeyPatch) -> list[Config]:
    """``runner.image.build`` replaced: each call appends the configuration it got and
    builds nothing."""
    from git_iterare.runner import image

    calls: list[Config] = []

    def build(repo: object, config: Config, **_: object) -> Iterator[object]:
        calls.append(config)
        return iter(())

    monkeypatch.setattr(image, "build", build)
    return calls


# --- the contract, over every registered agent -------------------------------------------

def test_contract_named_in_execute_and_credentials_help(agent: Agent, tmp_path: Path) -> None:
    execute = iterare("execute", "-h", cwd=tmp_path)
    assert execute.returncode == 0, execute.stderr
    assert agent.name in _listed(execute.stdout, "Agent to run")
    credentials = iterare("credentials", "-h", cwd=tmp_path)
    assert credentials.returncode == 0, credentials.stderr
    store = agent.credential_store
    # Only agents that keep credentials are offered there (shell needs none).
    assert (agent.name in _listed(credentials.stdout, "Whose credentials")) == (store is not None)
    if store is not None and store.api_key_env:
        api_key_env = _words(credentials.stdout).split("--api-key-env ")[1].split(" --")[0]
        assert store.api_key_env in api_key_env


def test_contract_image_options_show_in_image_build_and_set_their_key(
        agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        fake_image_build: list[Config], capsys: pytest.CaptureFixture[str]) -> None:
    shown = iterare("image", "build", "-h", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    page = MAN_IMAGE.read_text()
    own_keys = {key.name for key in agent.config_keys}
    for option in agent.image_options:
        assert option.key in own_keys, option
        section, _, key = option.key.partition(".")
        assert (f"{option.flag} {option.metavar} {option.help} ([{section}] {key})."
                in _words(shown.stdout))
        assert f".BI {option.flag.replace('-', chr(92) + '-')} " in page  # OPTIONS
        assert f"The default of\n.BR {option.flag.replace('-', chr(92) + '-')} ." in page
    # The build's own options keep their order around the agents' (after --agents).
    listed = _options(shown.stdout)
    flags = [option.flag for option in agent.image_options]
    assert [o for o in listed if o in BUILD_OWN] == BUILD_OWN
    assert all(listed.index("--agents") < listed.index(flag) < listed.index("--no-cache")
               for flag in flags)
    # Each sets its key for the build (the user's flag: the highest layer).
    monkeypatch.chdir(tmp_path)
    assert run(["git-iterare", "image", "build",
                *[word for flag in flags for word in (flag, "9.8.7")]]) == 0
    assert [{o.key: config[o.key] for o in agent.image_options}
            for config in fake_image_build] == [{o.key: "9.8.7" for o in agent.image_options}]
    assert capsys.readouterr().out == ""


def test_image_options_of_all_agents_are_distinct() -> None:
    flags = [option.flag for name in agents.names()
             for option in agents.get_agent(name).image_options]
    assert len(flags) == len(set(flags))
    assert not set(flags) & set(BUILD_OWN)
    assert all(re.fullmatch(r"--[a-z]+(-[a-z]+)*", flag) for flag in flags)


# --- Claude's version, as before ----------------------------------------------------------

def test_claude_version_is_the_same_option_as_before(tmp_path: Path) -> None:
    shown = iterare("image", "build", "-h", cwd=tmp_path).stdout
    assert _options(shown)[:5] == ["--base", "--ca-bundle", "--agents", "--claude-version",
                                   "--no-cache"]
    assert "--claude-version V npm version of Claude Code ([docker] claude_version)." in (
        _words(shown))
    # Its value is what the build installs: a malformed one stops it before the engine.
    env = {"DOCKER_HOST": "unix:///nonexistent.sock"}
    bad = iterare("image", "build", "--claude-version", "1.0 evil", "--tag", "itr-x:1",
                  cwd=tmp_path, env=env)
    assert (bad.returncode, bad.stderr.splitlines()[-1]) == (
        2, "error: @anthropic-ai/claude-code: bad version '1.0 evil' (use `latest` or a "
           "version number such as 1.2.3)")
    missing = iterare("image", "build", "--claude-version", cwd=tmp_path, env=env)
    assert (missing.returncode, missing.stderr) == (
        2, "error: Option '--claude-version' requires an argument.\n")


def test_help_that_lists_no_agents_names_none(tmp_path: Path) -> None:
    # The commands' list and interactive's --shell (which replaces run.agent, whichever).
    for args in (["-h"], ["interactive", "-h"]):
        shown = iterare(*args, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        for name in agents.names():
            store = agents.get_agent(name).credential_store
            if store is not None:
                assert name not in shown.stdout.lower() and store.label not in shown.stdout
    assert "Store an agent's credentials for runs" in iterare("-h", cwd=tmp_path).stdout


# --- an agent registered for the test ------------------------------------------------------

ZETA = '''
from git_iterare.agents.base import Agent, ImageOption
from git_iterare.agents.credstore import KeyFileStore
from git_iterare.settings import Key


class Zeta(Agent):
    name = "zeta"
    config_keys = (Key("zeta.version", "str", "latest", "npm version of Zeta.", gated=True),)
    credential_store = KeyFileStore("Zeta", "ZETA_API_KEY", "zeta-api-key")
    image_options = (ImageOption("--zeta-version", "zeta.version", "npm version of Zeta",
                                 metavar="VERSION"),)

    def command(self, *, prompt_file, config):
        return ["zeta", prompt_file]


AGENT = Zeta()
'''

PROBE = '''
import contextlib, io, sys
sys.path.insert(0, sys.argv[1])
from git_iterare import agents
agents.REGISTRY["zeta"] = "zeta_agent"
from git_iterare.cli.main import run
from git_iterare.config import Config
from git_iterare.runner import image


def build(repo, config, **_):
    print("zeta.version=" + config["zeta.version"])
    return iter(())


image.build = build
for args in (["execute", "-h"], ["credentials", "-h"], ["image", "build", "-h"],
             ["image", "build", "--zeta-version", "0.9"]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(["git-iterare", *args])
    print(f"== {args} {code}\\n{out.getvalue()}")
'''


def test_a_registered_agent_shows_in_the_help_with_its_image_options(tmp_path: Path) -> None:
    (tmp_path / "zeta_agent.py").write_text(ZETA)
    probe = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=tmp_path,
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "COLUMNS": "200"})
    assert probe.returncode == 0, probe.stderr
    parts = probe.stdout.split("== ")[1:]
    execute, credentials, build_help, build = parts
    assert execute.startswith("['execute', '-h'] 0")
    assert _listed(execute, "Agent to run") == ["claude", "codex", "gemini", "shell", "zeta"]
    assert _listed(credentials, "Whose credentials") == ["claude", "codex", "gemini", "zeta"]
    assert "GEMINI_API_KEY, ZETA_API_KEY)." in _words(credentials)
    assert ("--zeta-version VERSION npm version of Zeta ([zeta] version)."
            in _words(build_help))
    assert build == "['image', 'build', '--zeta-version', '0.9'] 0\nzeta.version=0.9\n\n"
