"""Installing the real Claude Code CLI for tests, once, into a cache directory."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fakeapi.npm_cli import cache_dir, install_cli

#: The version tests pin (override with ITERARE_TEST_CLAUDE_VERSION; "latest" works).
CLAUDE_VERSION = os.environ.get("ITERARE_TEST_CLAUDE_VERSION", "2.1.197")


def install_claude(folder: Path | None = None, version: str = CLAUDE_VERSION) -> Path:
    """The ``claude`` executable, installed with npm into ``folder`` when missing.

    Raises:
        RuntimeError: npm is missing or the install failed (its output attached).
    """
    return install_cli("@anthropic-ai/claude-code", version, "claude",
                       folder or cache_dir("claude"))
