"""Installing the real Gemini CLI for tests, once, into a cache directory (the host's Node
must be 20 or newer; the sandbox image brings its own, see git_iterare/agents/gemini.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: The version tests pin (override with ITERARE_TEST_GEMINI_VERSION; "latest" works).
GEMINI_VERSION = os.environ.get("ITERARE_TEST_GEMINI_VERSION", "0.61.0")


def cache_dir() -> Path:
    """``$ITERARE_TEST_CACHE/gemini``, default ``/tmp/iterare-test-cache/gemini``."""
    base = os.environ.get("ITERARE_TEST_CACHE") or "/tmp/iterare-test-cache"
    return Path(base) / "gemini"


def installed_version(gemini: Path) -> str | None:
    """What ``gemini --version`` says (``0.61.0``), or None when it does not run."""
    try:
        out = subprocess.run([str(gemini), "--version"], capture_output=True, text=True,
                             timeout=60, check=True, env={**os.environ, "HOME": "/nonexistent"}
                             ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split()[-1] if out.split() else None


def install_gemini(folder: Path | None = None, version: str = GEMINI_VERSION) -> Path:
    """The ``gemini`` executable, installed with npm into ``folder`` when missing.

    Raises:
        RuntimeError: npm is missing, the host's Node is older than 20, or the install
            failed (its output attached).
    """
    folder = folder or cache_dir()
    gemini = folder / "node_modules" / ".bin" / "gemini"
    have = installed_version(gemini)
    if have is not None and (version == "latest" or have == version):
        return gemini
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        raise RuntimeError("node and npm are needed to install Gemini CLI for this test")
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"],
                           capture_output=True, text=True, check=False).stdout.strip()
    if not major.isdigit() or int(major) < 20:
        raise RuntimeError(f"Gemini CLI needs Node 20 or newer; {node} is {major or '?'}")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "install", "--no-fund", "--no-audit", "--ignore-scripts",
                           "--prefix", str(folder), f"@google/gemini-cli@{version}"],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or installed_version(gemini) is None:
        raise RuntimeError(f"npm install of Gemini CLI failed:\n{done.stdout}{done.stderr}")
    return gemini
