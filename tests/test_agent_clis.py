"""The contract, for real: every registered agent's own program, started with the command
line, environment and credentials the agent gives, against a fake of its API
(tests/fakeapi/harness.py), on the host: it commits in a repository, and the agent reads
its output into the events and result that ``log``, ``show`` and the record use."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import agents, config
from tests.fakeapi.harness import CLOSING, COMMAND, HARNESSES, OPENING, no_fake

pytestmark = pytest.mark.slow

AGENT_USER = "itr-agents-cli"


@pytest.fixture(scope="module")
def agent_user() -> Iterator[str | None]:
    """A non-root user to run agents as (Claude Code refuses to skip permissions as root)."""
    if os.geteuid() != 0:
        yield None
        return
    try:
        pwd.getpwnam(AGENT_USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                        AGENT_USER], check=True)
        created = True
    yield AGENT_USER
    if created:
        subprocess.run(["userdel", AGENT_USER], check=False)


@pytest.fixture
def shared_dir(agent_user: str | None) -> Iterator[Path]:
    """A temp dir the agent user owns (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="itr-agents-cli-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_every_agent_has_a_harness() -> None:
    assert sorted(HARNESSES) == agents.names()


@pytest.mark.parametrize("name", agents.names())
def test_real_program_commits_through_a_fake_of_its_api(
        name: str, agent_user: str | None, shared_dir: Path) -> None:
    harness = HARNESSES[name]
    agent = agents.get_agent(name)
    bin_dir = harness.install()
    repo, home = shared_dir / "repo", shared_dir / "home"
    repo.mkdir()
    home.mkdir()
    (repo / "README.md").write_text("hello\n")
    for args in (["init", "-q", "-b", "main"], ["add", "README.md"],
                 ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    prompt = shared_dir / "prompt.md"
    prompt.write_text(harness.prompt)
    if agent_user:
        subprocess.run(["chown", "-R", agent_user, str(shared_dir)], check=True)
    log = shared_dir / "requests.jsonl"
    with (harness.fake or no_fake)(log) as fake:
        cfg = config.load(None, harness.overrides(fake.url), env={}, git_entries=[])
        secret = {harness.key_env: "sk-fake-key-0123"} if harness.key_env else {}
        creds = agent.credentials(cfg, secret)
        assert dict(creds.env) == secret
        path = f"{bin_dir}:/usr/bin:/bin" if bin_dir else "/usr/bin:/bin"
        env = {"HOME": str(home), "PATH": path,
               "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
               "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.com",
               **agent.environment(cfg), **creds.env, **harness.host_env()}
        argv = agent.command(prompt_file=str(prompt), config=cfg)
        runas = ["runuser", "-u", agent_user, "--"] if agent_user else []
        done = subprocess.run([*runas, "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                               *argv], cwd=repo, capture_output=True, text=True, timeout=300,
                              check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    history = subprocess.run(["git", "-c", f"safe.directory={repo}", "log", "--format=%s %an"],
                             cwd=repo, capture_output=True, text=True, check=True).stdout
    assert history == "Add notes Agent\ninitial Test Author\n"
    assert (repo / "notes.txt").read_text() == "made by the agent\n"

    events = [agent.parse_line(line) for line in done.stdout.splitlines()]
    result = agent.summarize(events, exit_code=done.returncode)
    assert result.is_error is False
    assert result.summary == CLOSING
    shown = "\n".join(filter(None, (agent.render(e, 1) for e in events)))
    assert OPENING in shown and CLOSING in shown
    requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if harness.fake is not None:
        uses = [p for e in events for p in e.parts if p.kind == "tool_use"]
        assert len(uses) == 1 and COMMAND in uses[0].text
        assert COMMAND[:40] in shown  # the tool call shows at verbosity 1
        results = [p for e in events for p in e.parts if p.kind == "tool_result"]
        assert [p.is_error for p in results] == [False]
        assert results[0].text.split()[-1] == "notes"  # git log --oneline: "<id> Add notes"
        assert "sk-fake-key-0123" not in log.read_text()
    harness.check(result, requests)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
def test_real_codex_looks_up_no_name_behind_a_gateway(agent_user: str | None,
                                                      shared_dir: Path) -> None:
    """With its gateway on 127.0.0.1, Codex resolves no name at all (telemetry and plugin
    downloads are off), so a run needs no allowlisted name, only the gateway's CIDR."""
    from tests.fakeapi.netwatch import API_PORT

    codex = agents.get_agent("codex")
    bin_dir = HARNESSES["codex"].install()
    (shared_dir / "home").mkdir()
    prompt = shared_dir / "prompt.md"
    prompt.write_text("Say hello.\n")
    subprocess.run(["chown", "-R", str(agent_user), str(shared_dir)], check=True)
    gateway = f"http://127.0.0.1:{API_PORT}/v1"
    cfg = config.load(None, {"codex.base_url": gateway,
                             "firewall.allowed_cidrs": ["127.0.0.1/32"]},
                      env={}, git_entries=[])
    # A gateway by address needs no allowlisted name: the CIDR lets it through.
    assert codex.required_domains(cfg) == []
    env = {"HOME": str(shared_dir / "home"), "PATH": f"{bin_dir}:/usr/bin:/bin",
           **codex.environment(cfg), **codex.credentials(cfg, {"OPENAI_API_KEY": "k"}).env}
    spec = shared_dir / "spec.json"
    spec.write_text(json.dumps({
        "api": "openai", "turns": [[{"type": "message", "text": "Hello."}]],
        "user": agent_user, "env": env, "cwd": str(shared_dir),
        "argv": codex.command(prompt_file=str(prompt), config=cfg)}))
    root = Path(__file__).parent.parent
    done = subprocess.run(["unshare", "--net", "--mount", sys.executable, "-m",
                           "tests.fakeapi.netwatch", str(spec)], cwd=root, capture_output=True,
                          text=True, timeout=300, check=True)
    seen = json.loads(done.stdout)
    assert seen["returncode"] == 0, seen["stderr"]
    events = [codex.parse_line(line) for line in seen["stdout"].splitlines()]
    assert codex.summarize(events).summary == "Hello."
    assert seen["dns"] == []
    assert [(r["method"], r["path"]) for r in seen["requests"]] == [("POST", "/v1/responses")]


def test_real_codex_resumes_its_session_in_a_later_round(agent_user: str | None,
                                                         shared_dir: Path) -> None:
    """A loop's later round (``codex exec [OPTIONS] resume --last -``) continues the first
    round's thread: its first request carries the first round's conversation and then the
    round's prompt; the thread's tokens it reports, the first round's taken off, are its
    own."""
    from git_iterare.runner.rounds import own_share, round_entry
    from tests.fakeapi.openai_server import USAGE, FakeOpenAI

    codex = agents.get_agent("codex")
    bin_dir = HARNESSES["codex"].install()
    (shared_dir / "home").mkdir()
    (shared_dir / "prompt.md").write_text("Create one.txt.\n")
    (shared_dir / "round.md").write_text("The check failed: two.txt is missing.\n")
    if agent_user:
        subprocess.run(["chown", "-R", agent_user, str(shared_dir)], check=True)
    turns: list[list[dict[str, str]]] = [
        [{"type": "message", "text": "Round one."},
         {"type": "shell", "command": "echo 1 > one.txt"}],
        [{"type": "message", "text": "Round one done."}],
        [{"type": "message", "text": "Round two."},
         {"type": "shell", "command": "echo 2 > two.txt"}],
        [{"type": "message", "text": "Round two done."}]]
    log = shared_dir / "requests.jsonl"
    results = []
    with FakeOpenAI(turns, log) as fake:
        cfg = config.load(None, {"codex.base_url": f"{fake.url}/v1"}, env={}, git_entries=[])
        env = {"HOME": str(shared_dir / "home"), "PATH": f"{bin_dir}:/usr/bin:/bin",
               **codex.environment(cfg), **codex.credentials(cfg, {"OPENAI_API_KEY": "k"}).env}
        runas = ["runuser", "-u", agent_user, "--"] if agent_user else []
        for argv in (codex.command(prompt_file=str(shared_dir / "prompt.md"), config=cfg),
                     codex.round_command(prompt_file=str(shared_dir / "prompt.md"),
                                         round_file=str(shared_dir / "round.md"), config=cfg)):
            done = subprocess.run([*runas, "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                                   *argv], cwd=shared_dir, capture_output=True, text=True,
                                  timeout=300, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
            events = [codex.parse_line(line) for line in done.stdout.splitlines()]
            results.append(codex.summarize(events, exit_code=0))
    first, second = results
    assert (first.summary, second.summary) == ("Round one done.", "Round two done.")
    assert first.session and second.session == first.session
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["turn"] for r in requests] == [0, 1, 2, 3]
    said = [(item.get("role"), json.dumps(item.get("content")))
            for item in requests[2]["body"]["input"] if isinstance(item, dict)]
    users = [text for role, text in said if role == "user"]
    assert "Create one.txt." in users[-2] and "two.txt is missing" in users[-1], said
    assert any(role == "assistant" and "Round one done." in text for role, text in said)
    # Two requests a round, each reporting USAGE.
    own = {"input": 2 * USAGE["input_tokens"], "output": 2 * USAGE["output_tokens"]}
    assert {k: first.tokens[k] for k in own} == own
    assert {k: second.tokens[k] for k in own} == {k: 2 * n for k, n in own.items()}
    earlier = [round_entry(1, first, started=None, ended=None, exit_code=0, check_exit=1,
                           check_seconds=None, check_tail="")]
    assert own_share(second, earlier).tokens == first.tokens
