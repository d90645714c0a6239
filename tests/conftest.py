"""Fixtures shared by all tests.

Every test is hermetic (as git-revise's tests are): HOME and the XDG directories point into
a temporary folder, git reads no system or user config, author and committer are fixed,
and no editor or pager can start. The installed ``git-iterare`` executables (next to the
running Python) come first on PATH, so tests run the commands as users do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN_DIR = Path(sys.executable).parent

#: The sandbox image and the local test internet, the predecessor iterare, the second
#: (DinD) engine, Podman, and the swarm lab (session fixtures).
pytest_plugins = ["tests.sandbox_fixtures", "tests.legacy_iterare", "tests.engines",
                  "tests.podman_engine", "tests.swarm"]


@pytest.fixture(autouse=True)
def hermetic_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
                 ) -> Iterator[Path]:
    """Isolate the test from the user's configuration; returns the fake HOME."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith(("GIT_", "ITERARE_")) or name in ("NO_COLOR", "XDG_CONFIG_HOME"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.setenv("GIT_PAGER", "cat")
    monkeypatch.setenv("PAGER", "cat")
    monkeypatch.setenv("MANPAGER", "cat")
    monkeypatch.setenv("PATH", f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    yield home
    # Secrets registered by one test must not redact another test's output.
    from git_iterare import proc

    proc._SECRETS.clear()


def git(*args: str, cwd: Path | str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run git in ``cwd`` and return the result (text, captured)."""
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True,
                          text=True, **kwargs)


def iterare(*args: str, cwd: Path | str, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``git iterare ARGS`` in ``cwd`` as a user would; never raises on failure."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(["git", "iterare", *args], cwd=cwd, capture_output=True, text=True,
                          input=input, env=full_env, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh repository on branch main with one commit (README.md)."""
    path = tmp_path / "repo"
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    (path / "README.md").write_text("hello\n")
    git("add", "README.md", cwd=path)
    git("commit", "-q", "-m", "initial", cwd=path)
    return path
