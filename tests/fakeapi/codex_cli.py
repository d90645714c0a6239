"""Installing the real OpenAI Codex CLI for tests, once, into a cache directory.

npm installs ``@openai/codex`` with its binary as a per-platform optional dependency
(``@openai/codex-linux-x64``, about 400 MB).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.fakeapi.npm_cli import cache_dir, install_cli

#: The version tests pin (override with ITERARE_TEST_CODEX_VERSION; "latest" works).
CODEX_VERSION = os.environ.get("ITERARE_TEST_CODEX_VERSION", "0.171.0")


def install_codex(folder: Path | None = None, version: str = CODEX_VERSION) -> Path:
    """The ``codex`` executable, installed with npm into ``folder`` when missing.

    Raises:
        RuntimeError: npm is missing or the install failed (its output attached).
    """
    return install_cli("@openai/codex", version, "codex", folder or cache_dir("codex"))
