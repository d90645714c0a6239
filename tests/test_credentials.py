"""``git iterare credentials`` and the credentials store."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from git_iterare import agents, config, proc
from git_iterare.agents.base import Credentials
from git_iterare.agents.claude_credentials import STORE
from git_iterare.errors import OperationFailed, UserError
from tests.conftest import iterare


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def store(hermetic_env: Path) -> Path:
    return hermetic_env / ".config" / "iterare"


def cfg(**values: str) -> config.Config:
    return config.load(None, values, git_entries=[])


def test_token_file_stores_api_key_0600(tmp_path: Path, store: Path) -> None:
    token = tmp_path / "token.txt"
    token.write_text("  sk-ant-api03-secret-value\n")
    done = iterare("credentials", "--token-file", str(token), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (f"stored Claude API key in {store / 'anthropic-api-key'} "
                           "(mode 0600)\n")
    assert (store / "anthropic-api-key").read_text() == "sk-ant-api03-secret-value\n"
    assert (mode(store), mode(store / "anthropic-api-key")) == (0o700, 0o600)
    assert agents.get_agent("claude").credentials(cfg(), {}) == Credentials(
        env={"ANTHROPIC_API_KEY": "sk-ant-api03-secret-value"})


def test_oauth_token_from_stdin(tmp_path: Path, store: Path) -> None:
    done = iterare("credentials", cwd=tmp_path, input="sk-ant-oat01-abc\n")
    assert done.stdout == (f"stored Claude OAuth token in {store / 'claude-oauth-token'} "
                           "(mode 0600)\n")
    assert "sk-ant-oat01-abc" not in done.stdout + done.stderr
    assert agents.get_agent("claude").credentials(cfg(), {}) == Credentials(
        env={"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-abc"})


def test_api_key_from_env(tmp_path: Path, store: Path) -> None:
    done = iterare("credentials", "--api-key-env", cwd=tmp_path,
                   env={"ANTHROPIC_API_KEY": "sk-ant-api03-env"})
    assert done.returncode == 0
    assert (store / "anthropic-api-key").read_text() == "sk-ant-api03-env\n"
    assert "sk-ant-api03-env" not in done.stdout + done.stderr


def test_api_key_env_missing(tmp_path: Path) -> None:
    done = iterare("credentials", "--api-key-env", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "error: ANTHROPIC_API_KEY is not set (export it, or paste a token)\n")


def test_refuses_to_replace_without_force(tmp_path: Path, store: Path) -> None:
    iterare("credentials", cwd=tmp_path, input="sk-ant-api03-first\n")
    done = iterare("credentials", cwd=tmp_path, input="sk-ant-oat01-second\n")
    assert (done.returncode, done.stderr) == (
        2, f"error: Claude credentials already stored in {store / 'anthropic-api-key'} "
           "(use --force to replace them)\n")
    done = iterare("credentials", "--force", cwd=tmp_path, input="sk-ant-oat01-second\n")
    assert done.returncode == 0
    assert sorted(p.name for p in store.iterdir()) == ["claude-oauth-token"]


def test_copies_claude_login(tmp_path: Path, hermetic_env: Path, store: Path) -> None:
    login = {"claudeAiOauth": {"accessToken": "sk-ant-oat01-x",
                               "refreshToken": "sk-ant-ort01-refresh"}}
    (hermetic_env / ".claude").mkdir()
    (hermetic_env / ".claude" / ".credentials.json").write_text(json.dumps(login))
    (hermetic_env / ".claude.json").write_text('{"hasCompletedOnboarding": true}')
    done = iterare("credentials", cwd=tmp_path)
    assert done.stdout == (f"stored Claude Code login in {store / '.credentials.json'}, "
                           f"{store / '.claude.json'} (mode 0600)\n")
    assert mode(store / ".credentials.json") == mode(store / ".claude.json") == 0o600
    creds = agents.get_agent("claude").credentials(cfg(), {})
    assert proc.redact("sk-ant-oat01-x") == "***"
    assert creds == Credentials(files={
        ".claude/.credentials.json": json.dumps(login).encode(),
        ".claude.json": b'{"hasCompletedOnboarding": true}'})


def test_credentials_path_overrides_dir(tmp_path: Path) -> None:
    legacy = tmp_path / "iterare-creds"
    done = iterare("credentials", cwd=tmp_path, input="tok\n",
                   env={"ITERARE_CLAUDE_CREDENTIALS_PATH": str(legacy)})
    assert done.returncode == 0, done.stderr
    assert (legacy / "claude-oauth-token").read_text() == "tok\n"
    assert mode(legacy) == 0o700


def test_empty_and_multiword_tokens(tmp_path: Path) -> None:
    assert iterare("credentials", cwd=tmp_path, input="\n").stderr == (
        "error: stdin: no token given\n")
    assert iterare("credentials", cwd=tmp_path, input="a b\n").stderr == (
        "error: stdin: a token is one word on one line\n")


def test_missing_token_file(tmp_path: Path) -> None:
    done = iterare("credentials", "--token-file", str(tmp_path / "nope"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {tmp_path / 'nope'}: cannot read:")


def test_verbose_never_echoes_secret(tmp_path: Path) -> None:
    done = iterare("--verbose", "credentials", cwd=tmp_path, input="sk-ant-api03-hush\n")
    assert done.returncode == 0
    assert "hush" not in done.stdout + done.stderr


def test_readable_file_fixed_with_warning(store: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    # iterare copied its credential files 0644: the user's own files are made 0600.
    STORE.store_token(cfg(), "sk-ant-api03-z")
    path = store / "anthropic-api-key"
    path.chmod(0o644)
    loaded = STORE.load(cfg())
    assert loaded is not None and loaded.env == {"ANTHROPIC_API_KEY": "sk-ant-api03-z"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert capsys.readouterr().err == (
        f"warning: {path} was readable by other users (mode 0644); made it 0600 (replace "
        "the credential if it may have leaked)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_readable_file_of_another_user_refused(store: Path) -> None:
    STORE.store_token(cfg(), "sk-ant-api03-z")
    path = store / "anthropic-api-key"
    path.chmod(0o640)
    os.chown(path, 54321, 54321)
    with pytest.raises(UserError, match=r"readable by other users \(mode 0640\) and owned "
                                        r"by uid 54321, not you"):
        STORE.load(cfg())
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_loaded_secret_is_redacted(store: Path) -> None:
    STORE.store_token(cfg(), "sk-ant-api03-redactme")
    STORE.load(cfg())
    assert proc.redact("x sk-ant-api03-redactme y") == "x *** y"


def test_login_in_sandbox_hook(tmp_path: Path, store: Path) -> None:
    calls: list[tuple[list[str], Path]] = []

    def launcher(argv: Sequence[str], home: Path) -> int:
        calls.append((list(argv), home))
        (home / ".claude").mkdir()
        (home / ".claude" / ".credentials.json").write_text("{}")
        return 0

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stored = STORE.login_in_sandbox(launcher, cfg(), scratch)
    assert calls == [(["claude", "auth", "login"], scratch)]
    assert stored.paths == (store / ".credentials.json",)


def test_login_in_sandbox_failure(tmp_path: Path, store: Path) -> None:
    with pytest.raises(OperationFailed, match=r"exit status 1"):
        STORE.login_in_sandbox(lambda argv, home: 1, cfg(), tmp_path)
    with pytest.raises(OperationFailed, match=r"without storing a login"):
        STORE.login_in_sandbox(lambda argv, home: 0, cfg(), tmp_path)


def test_pasted_token_is_not_echoed(tmp_path: Path, store: Path) -> None:
    """At a terminal the token is read without echo (a pty as controlling terminal)."""
    import fcntl
    import os
    import pty
    import subprocess
    import termios
    import time

    master, slave = pty.openpty()

    def take_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    child = subprocess.Popen(["git", "iterare", "credentials"], cwd=tmp_path, stdin=slave,
                             stdout=slave, stderr=slave, start_new_session=True,
                             preexec_fn=take_terminal)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    while b"token: " not in seen and time.monotonic() < deadline:
        seen += os.read(master, 1024)
    os.write(master, b"sk-ant-oat01-typed\n")
    while True:
        try:
            chunk = os.read(master, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert child.wait(timeout=30) == 0
    os.close(master)
    text = seen.decode().replace("\r\n", "\n")
    assert "sk-ant-oat01-typed" not in text
    assert text == ("Paste an API key or `claude setup-token` token: \n"
                    f"stored Claude OAuth token in {store / 'claude-oauth-token'} (mode 0600)\n")
    assert (store / "claude-oauth-token").read_text() == "sk-ant-oat01-typed\n"


def test_login_in_the_sandbox_is_refused_on_a_remote_engine(tmp_path: Path,
                                                             hermetic_env: Path) -> None:
    """The login writes into a folder of this machine that a remote engine cannot mount:
    one line, before anything is asked of the engine."""
    from git_iterare.runner.interactive import login_launcher
    from git_iterare.sandbox import engine as eng

    launch = login_launcher(None, cfg(), agents.get_agent("claude"))
    with eng.using(eng.Engine("box", "ssh://me@203.0.113.5")), \
            pytest.raises(UserError) as info:
        launch(["claude", "/login"], tmp_path)
    assert info.value.render().startswith(
        "logging in inside the sandbox needs a local Docker engine; ssh://me@203.0.113.5 "
        "(context box) is remote")
    assert "\n" not in info.value.render()


def test_an_unknown_agent_given_with_agent_names_that_option(tmp_path: Path,
                                                              hermetic_env: Path) -> None:
    done = iterare("credentials", "--agent", "nosuch", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("error: unknown agent 'nosuch' (valid: claude, codex, gemini, "
                           "shell) (give --agent one of them: `git iterare credentials "
                           "--agent NAME`)\n")


def _iterare_leftovers(folder: Path) -> None:
    """What iterare's runs leave in its credentials directory: Docker, told to bind-mount
    ``.credentials.json`` and ``.claude.json`` that did not exist, made them directories."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in (".credentials.json", ".claude.json"):
        (folder / name).mkdir(mode=0o755)


def test_force_with_iterare_directories_keeps_the_stored_key(tmp_path: Path, store: Path
                                                             ) -> None:
    iterare("credentials", cwd=tmp_path, input="sk-ant-api03-first\n")
    _iterare_leftovers(store)
    done = iterare("credentials", "--force", cwd=tmp_path, input="sk-ant-api03-second\n")
    one, two = store / ".credentials.json", store / ".claude.json"
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"error: {one}, {two}: directories where credential files belong (Docker "
               f"makes a directory when it mounts a missing file, as iterare's runs did) "
               f"(remove them: rmdir {one} {two})\n")
    assert (store / "anthropic-api-key").read_text() == "sk-ant-api03-first\n"
    assert mode(one) == 0o755
    one.rmdir()
    two.rmdir()
    done = iterare("credentials", "--force", cwd=tmp_path, input="sk-ant-api03-second\n")
    assert (done.returncode, done.stderr) == (0, "")
    assert (store / "anthropic-api-key").read_text() == "sk-ant-api03-second\n"


def test_without_force_a_directory_is_named_not_called_credentials(tmp_path: Path,
                                                                   store: Path) -> None:
    _iterare_leftovers(store)
    (store / ".claude.json").rmdir()
    (store / ".credentials.json" / "junk").write_text("x")
    done = iterare("credentials", cwd=tmp_path, input="sk-ant-api03-first\n")
    assert (done.returncode, done.stderr) == (
        2, f"error: {store / '.credentials.json'}: a directory where a credential "
           f"file belongs (Docker makes a directory when it mounts a missing file, as iterare's "
           f"runs did) (remove it: rm -r {store / '.credentials.json'})\n")
    assert not (store / "anthropic-api-key").exists()


def test_loading_refuses_a_directory_without_changing_it(store: Path) -> None:
    # execute: only iterare's leftovers in the directory, no credential.
    _iterare_leftovers(store)
    with pytest.raises(UserError) as caught:
        STORE.load(cfg())
    assert caught.value.message == (
        f"{store / '.credentials.json'}, {store / '.claude.json'}: directories where "
        "credential files belong (Docker makes a directory when it mounts a missing file, "
        "as iterare's runs did)")
    assert mode(store / ".credentials.json") == 0o755


def test_a_failed_write_leaves_the_stored_credentials(store: Path) -> None:
    STORE.store_token(cfg(), "sk-ant-api03-first")
    # The new token's temporary file cannot be made: the write fails as a full disk would.
    (store / f".claude-oauth-token.tmp{os.getpid()}").mkdir()
    with pytest.raises(FileExistsError):
        STORE.store_token(cfg(), "sk-ant-oat01-second", force=True)
    assert (store / "anthropic-api-key").read_text() == "sk-ant-api03-first\n"
    assert not (store / "claude-oauth-token").exists()
