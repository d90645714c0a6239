"""The Docker-free tests need no Docker at all: with no ``docker`` executable on PATH and
DOCKER_HOST naming a socket that does not exist, ``pytest -m "not docker"`` still collects
(no module or plugin asks Docker anything at import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _path_without_docker(bin_dir: Path) -> str:
    """Fill ``bin_dir`` with links to every executable on PATH except Docker's own; return
    a PATH of the running Python's directory and ``bin_dir``."""
    bin_dir.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        folder = Path(entry)
        if not folder.is_dir():
            continue
        for exe in folder.iterdir():
            target = bin_dir / exe.name
            if exe.name.startswith("docker") or target.exists() or target.is_symlink():
                continue
            target.symlink_to(exe)
    return os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir)])


def test_the_docker_free_tests_collect_without_docker(tmp_path: Path) -> None:
    path = _path_without_docker(tmp_path / "bin")
    env = dict(os.environ, PATH=path, DOCKER_HOST="unix:///nonexistent.sock")
    env.pop("ITR_TESTNET", None)  # else the subnet would not be looked for
    probe = subprocess.run(["sh", "-c", "command -v docker"], env=env, capture_output=True,
                           text=True, check=False)
    assert probe.returncode != 0, probe.stdout
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not docker",
         "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "test_the_docker_free_tests_collect_without_docker" in result.stdout
    assert "error" not in result.stdout.lower().splitlines()[-1], result.stdout[-500:]
