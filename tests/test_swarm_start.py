"""container/swarm-start's refusals before it reaches a tree server, under dash, on this
machine (no Docker: the whole path is in test_swarm_start_e2e.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SWARM_START = Path(__file__).parent.parent / "container" / "swarm-start"
#: What a minimal project image has: a shell, tar and the basic tools, no HTTP client.
TOOLS = ("sh", "tar", "cat", "date", "sleep", "id", "mkdir", "rm", "head", "grep")


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS:
        found = shutil.which("dash" if tool == "sh" else tool)
        assert found, tool
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return subprocess.run([str(bin_dir / "sh"), "-c", SWARM_START.read_text(), "swarm-start",
                           *args], capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": str(bin_dir), "TMPDIR": str(tmp_path), **env})


@pytest.mark.parametrize(("args", "env", "line"), [
    ((), {}, "iterare-sandbox: error: no command given"),
    (("true",), {"ITERARE_SNAPSHOT_SECONDS": "1m"},
     "iterare-sandbox: error: ITERARE_SNAPSHOT_SECONDS must be a number of seconds, not '1m'"),
    (("true",), {}, "iterare-sandbox: error: the image needs curl, GNU wget or python3 to "
                    "reach git-iterare's tree server"),
])
def test_refusals_are_one_line_and_125(tmp_path: Path, args: tuple[str, ...],
                                       env: dict[str, str], line: str) -> None:
    result = _run(tmp_path, *args, **env)
    assert (result.returncode, result.stderr, result.stdout) == (125, line + "\n", "")
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # its scratch folder is gone


def test_trees_it_cannot_write_are_one_line(tmp_path: Path) -> None:
    if os.path.isdir("/workspace") and os.access("/workspace", os.W_OK) and \
            os.access("/git", os.W_OK):
        pytest.fail("this machine's /workspace and /git are writable: the test would fetch "
                    "into them")
    result = _run(tmp_path, "true", ITERARE_TREES_CLIENT="python3")
    assert result.returncode == 125
    assert result.stderr.startswith("iterare-sandbox: error: /workspace is not a folder uid ")
    assert result.stderr.count("\n") == 1
