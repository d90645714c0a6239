"""Installing the real Gemini CLI for tests, once, into a cache directory (the host's Node
must be 20 or newer; the sandbox image brings its own, see git_iterare/agents/gemini.py),
and its system settings where the CLI accepts them."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

from tests.fakeapi.npm_cli import cache_dir, install_cli

#: The version tests pin (override with ITERARE_TEST_GEMINI_VERSION; "latest" works).
GEMINI_VERSION = os.environ.get("ITERARE_TEST_GEMINI_VERSION", "0.61.0")


def install_gemini(folder: Path | None = None, version: str = GEMINI_VERSION) -> Path:
    """The ``gemini`` executable, installed with npm into ``folder`` when missing.

    Raises:
        RuntimeError: npm is missing or the install failed (its output attached).
    """
    return install_cli("@google/gemini-cli", version, "gemini", folder or cache_dir("gemini"))


def system_settings(settings: dict[str, object] | None = None) -> Path:
    """A system settings file for Gemini CLI on the host, as the install step writes
    ``/opt/gemini/settings.json`` in the image (the agent's settings by default).

    The CLI reads system settings only from a file whose folders up to ``/`` are root's
    and not group- or world-writable, so it goes in a fresh folder under ``/run``
    (removed when the test process exits).

    Raises:
        PermissionError: not root (no such folder can be made).
    """
    from git_iterare.agents.gemini import SETTINGS

    if os.geteuid() != 0:
        raise PermissionError("Gemini CLI's system settings need a folder of root's")
    folder = Path(tempfile.mkdtemp(prefix="itr-gemini-", dir="/run"))
    atexit.register(shutil.rmtree, folder, True)
    folder.chmod(0o755)
    path = folder / "settings.json"
    path.write_text(json.dumps(SETTINGS if settings is None else settings))
    path.chmod(0o644)
    return path
