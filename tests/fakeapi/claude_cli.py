"""Installing the real Claude Code CLI for tests, once, into a cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: The version tests pin (override with ITERARE_TEST_CLAUDE_VERSION; "latest" works).
CLAUDE_VERSION = os.environ.get("ITERARE_TEST_CLAUDE_VERSION", "2.1.197")


def cache_dir() -> Path:
    """``$ITERARE_TEST_CACHE/claude``, default ``/tmp/iterare-test-cache/claude``."""
    base = os.environ.get("ITERARE_TEST_CACHE") or "/tmp/iterare-test-cache"
    return Path(base) / "claude"


def installed_version(claude: Path) -> str | None:
    """What ``claude --version`` says (``2.1.197``), or None when it does not run."""
    try:
        out = subprocess.run([str(claude), "--version"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split()[0] if out.split() else None


def install_claude(folder: Path | None = None, version: str = CLAUDE_VERSION) -> Path:
    """The ``claude`` executable, installed with npm into ``folder`` when missing.

    Raises:
        RuntimeError: npm is missing or the install failed (its output attached).
    """
    folder = folder or cache_dir()
    claude = folder / "node_modules" / ".bin" / "claude"
    have = installed_version(claude)
    if have is not None and (version == "latest" or have == version):
        return claude
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to install Claude Code for this test")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "install", "--no-fund", "--no-audit", "--prefix", str(folder),
                           f"@anthropic-ai/claude-code@{version}"],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or installed_version(claude) is None:
        raise RuntimeError(f"npm install of Claude Code failed:\n{done.stdout}{done.stderr}")
    return claude
