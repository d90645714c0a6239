"""Installing an agent's real CLI from npm for tests, once, into a cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def cache_dir(name: str) -> Path:
    """``$ITERARE_TEST_CACHE/<name>``, default ``/tmp/iterare-test-cache/<name>``."""
    base = os.environ.get("ITERARE_TEST_CACHE") or "/tmp/iterare-test-cache"
    return Path(base) / name


def installed_version(executable: Path) -> str | None:
    """The version ``executable --version`` prints (its first word that starts with a
    digit: ``2.1.197``, ``0.171.0``), or None when it does not run."""
    try:
        out = subprocess.run([str(executable), "--version"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = [w for w in out.split() if w[:1].isdigit()]
    return words[0] if words else None


def install_cli(package: str, version: str, executable: str, folder: Path) -> Path:
    """``executable`` of the npm ``package`` at ``version``, installed into ``folder``
    when missing (the host's CA bundle is given to npm for TLS-intercepting proxies).

    Raises:
        RuntimeError: npm is missing or the install failed (its output attached).
    """
    exe = folder / "node_modules" / ".bin" / executable
    have = installed_version(exe)
    if have is not None and (version == "latest" or have == version):
        return exe
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"npm is needed to install {package} for this test")
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        env.setdefault("NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/ca-certificates.crt")
    done = subprocess.run([npm, "install", "--no-fund", "--no-audit", "--prefix", str(folder),
                           f"{package}@{version}"], capture_output=True, text=True,
                          timeout=900, check=False, env=env)
    if done.returncode != 0 or installed_version(exe) is None:
        raise RuntimeError(f"npm install of {package} failed:\n{done.stdout}{done.stderr}")
    return exe
