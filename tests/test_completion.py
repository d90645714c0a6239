"""Shell completion through git's own completion machinery."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from git_iterare.cli.registry import COMMANDS
from tests.conftest import iterare

GIT_BASH_COMPLETION = Path("/usr/share/bash-completion/completions/git")

DRIVER = r"""
source "$1"
source <(git iterare completion bash)
COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
__git_wrap__git_main
printf '%s\n' "${COMPREPLY[@]}"
"""


def complete(line: str, cwd: Path) -> list[str]:
    """What bash offers for ``line`` (ending at the cursor), with git's completion loaded."""
    assert GIT_BASH_COMPLETION.is_file(), "git's bash completion is not installed"
    result = subprocess.run(["bash", "-c", DRIVER, "bash", str(GIT_BASH_COMPLETION), line],
                            cwd=cwd, capture_output=True, text=True, check=True)
    return [w.strip() for w in result.stdout.splitlines() if w.strip()]


def test_bash_completes_subcommands(repo: Path) -> None:
    assert complete("git iterare ", repo) == sorted(COMMANDS)
    assert complete("git iterare con", repo) == ["config"]


def test_bash_completes_options(repo: Path) -> None:
    assert complete("git iterare init --f", repo) == ["--force"]
    assert "--show-origin" in complete("git iterare config --", repo)


def test_bash_completes_prompt_names_and_run_ids(repo: Path) -> None:
    prompts = repo / ".iterare" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "refactor.md").write_text("x")
    (prompts / "review.md").write_text("y")
    out = subprocess.run(
        ["bash", "-c", 'source "$1"; source <(git iterare completion bash); '
         "__git_iterare_prompts; __git_iterare_runs",
         "bash", str(GIT_BASH_COMPLETION)],
        cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["refactor", "review"]
    subprocess.run(["git", "update-ref", "refs/iterare/runs/fix-0123abcd", "HEAD"], cwd=repo,
                   check=True)
    out = subprocess.run(
        ["bash", "-c", 'source "$1"; source <(git iterare completion bash); __git_iterare_runs',
         "bash", str(GIT_BASH_COMPLETION)], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["fix-0123abcd"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(shell: str, repo: Path) -> None:
    script = iterare("completion", shell, cwd=repo)
    assert script.returncode == 0
    for name in COMMANDS:
        assert name in script.stdout
    exe = shutil.which(shell)
    assert exe, f"{shell} is not installed (.ci/run installs it)"
    check = subprocess.run([exe, "-n"], input=script.stdout, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_unknown_shell_exits_2(repo: Path) -> None:
    result = iterare("completion", "tcsh", cwd=repo)
    assert result.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in result.stderr


def test_completion_does_not_import_heavy_modules(repo: Path) -> None:
    code = ("import sys; from git_iterare.cli.main import run; "
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    run(['git-iterare', 'completion', 'bash'])\n"
            "print(sorted(m for m in ('docker', 'dulwich', 'yaml') if m in sys.modules))")
    result = subprocess.run(["python3", "-c", code], cwd=repo, capture_output=True, text=True)
    assert result.stdout == "[]\n", result.stderr
