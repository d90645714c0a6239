"""The real predecessor, iterare (PyPI ``iterare-llm==0.2.3``), for switching tests.

It needs Python 3.13, which these machines have under pyenv. :func:`legacy` (a session
fixture) installs it into a virtual environment of its own with pip; its ``init``, its
runs file and its log files are then used as they come. Where no Python 3.13 is found,
the tests use its ``init`` output recorded in ``tests/data/legacy`` (see the README there)
-- never hand-written imitations -- and skip what needs its runs.

iterare's ``execute`` needs its image ``sohonet/iterare-llm`` from Docker Hub, which these
machines cannot reach, so a run is made the way its ``execute`` makes one, by its own
functions: ``generate_run_name``, ``create_worktree`` (a worktree ``workspaces/<run>`` on
branch ``<run>``), ``prepare_workspace`` (its ``.claude-auto-config.json`` and
``.claude-prompt.md`` in the worktree, from the prompt file ``.iterare/prompts/<name>.md``
when there is one), ``register_run`` (the runs file) and the log file its
``launch_container`` creates, into which its container tees Claude Code's stream-json
output (by default ``tests/data/claude-stream.jsonl``, recorded from the real Claude Code).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RECORDED = HERE / "data" / "legacy"
CLAUDE_STREAM = HERE / "data" / "claude-stream.jsonl"
VERSION = "iterare-llm==0.2.3"

#: What iterare's functions do for one run (see the module docstring); prints JSON.
_MAKE_RUN = """
import json, os, sys
from pathlib import Path
from iterare_llm.git import create_worktree
from iterare_llm.paths import get_log_file_path
from iterare_llm.prompt import parse_prompt_file
from iterare_llm.run import generate_run_name, get_runs_file, register_run
from iterare_llm.workspace import prepare_workspace
project, prompt_name, stream = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
run_name = generate_run_name(prompt_name)
worktree = create_worktree(project, run_name, sys.argv[4])
prompt_file = project / ".iterare" / "prompts" / f"{prompt_name}.md"
content = parse_prompt_file(prompt_file).content if prompt_file.is_file() else "Do it.\\n"
prepare_workspace(worktree, content)
register_run(project, run_name, prompt_name)
log_file = get_log_file_path(run_name)
log_file.parent.mkdir(parents=True, exist_ok=True)
log_file.touch()
log_file.chmod(0o666)
log_file.write_bytes(Path(stream).read_bytes())
print(json.dumps({"run": run_name, "worktree": str(worktree),
                  "runs_file": str(get_runs_file(project)), "log": str(log_file)}))
"""


def python313() -> str | None:
    """A Python 3.13 interpreter under pyenv (or on PATH), or None."""
    roots = [os.environ.get("PYENV_ROOT", ""), "/root/.pyenv", os.path.expanduser("~/.pyenv")]
    for root in roots:
        if root:
            found = sorted(glob.glob(f"{root}/versions/3.13*/bin/python3.13"))
            if found:
                return found[-1]
    return shutil.which("python3.13")


@dataclass(frozen=True)
class Legacy:
    """iterare installed in a virtual environment (``bin`` holds its executables)."""

    bin: Path

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        """``iterare ARGS`` in ``cwd`` with the test's environment (HOME, XDG dirs)."""
        return subprocess.run([str(self.bin / "iterare"), *args], cwd=cwd, text=True,
                              capture_output=True, check=False, env=_env())

    def init(self, project: Path) -> None:
        """``iterare init`` in ``project``."""
        done = self.run("init", str(project), cwd=project)
        assert done.returncode == 0, done.stderr

    def make_run(self, project: Path, prompt_name: str, base: str = "main",
                 stream: Path = CLAUDE_STREAM) -> dict[str, str]:
        """A run as iterare's ``execute`` makes it (see the module docstring), its log
        ``stream``."""
        done = subprocess.run([str(self.bin / "python"), "-c", _MAKE_RUN, str(project),
                               prompt_name, str(stream), base], cwd=project,
                              text=True, capture_output=True, check=False, env=_env())
        assert done.returncode == 0, done.stderr
        result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture(scope="session")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Legacy | None:
    """iterare 0.2.3 in a virtual environment of its own; None when no Python 3.13 is
    found (tests then use the recorded files, see :func:`init_project`)."""
    python = python313()
    if python is None:
        return None
    venv = tmp_path_factory.mktemp("iterare-llm-venv")
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                           "--disable-pip-version-check", VERSION], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return Legacy(venv / "bin")


def init_project(legacy: Legacy | None, project: Path) -> None:
    """``iterare init`` in ``project``: by iterare itself, else its recorded output."""
    if legacy is not None:
        legacy.init(project)
        return
    recorded = RECORDED / "init"
    for path in sorted(recorded.rglob("*")):
        if path.is_file():
            dest = project / path.relative_to(recorded)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    (project / "workspaces").mkdir(exist_ok=True)
