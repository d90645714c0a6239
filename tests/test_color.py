"""Colors follow --color, NO_COLOR and git's color.iterare / color.ui."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, iterare

RED = "\x1b[31m"


def _error_colored(repo: Path, *flags: str, env: dict[str, str] | None = None) -> bool:
    result = iterare(*flags, "confg", cwd=repo, env=env)
    assert result.returncode == 2
    return result.stderr.startswith(RED)


def test_auto_is_plain_when_not_a_terminal(repo: Path) -> None:
    assert not _error_colored(repo)


@pytest.mark.parametrize(("flag", "colored"), [("--color=always", True), ("--color", True),
                                               ("--color=never", False)])
def test_color_flag(repo: Path, flag: str, colored: bool) -> None:
    assert _error_colored(repo, flag) is colored


@pytest.mark.parametrize(("flags", "colored"), [
    (["--color", "always"], True), (["--color", "never"], False), (["--color", "auto"], False),
    (["--color=always"], True), (["--color"], True)])
def test_color_takes_its_value_as_a_separate_word_too(repo: Path, flags: list[str],
                                                      colored: bool) -> None:
    # Before the command: the value is not taken for the command's name.
    result = iterare(*flags, "confg", cwd=repo)
    assert result.returncode == 2
    assert "'confg' is not a git iterare command" in result.stderr
    assert result.stderr.startswith(RED) is colored
    # After it, and a bare --color before a command name.
    for args in ([*flags, "list"], ["list", *flags], ["list", *flags, "--all"]):
        listed = iterare(*args, cwd=repo)
        assert (listed.returncode, listed.stdout) == (0, ""), args
        assert listed.stderr.startswith("no runs"), args


def test_no_color_turns_it_off_but_the_flag_wins(repo: Path) -> None:
    git("config", "color.ui", "always", cwd=repo)
    assert not _error_colored(repo, env={"NO_COLOR": "1"})
    assert _error_colored(repo, "--color=always", env={"NO_COLOR": "1"})


def test_git_color_settings(repo: Path) -> None:
    git("config", "color.ui", "always", cwd=repo)
    assert _error_colored(repo)
    git("config", "color.iterare", "never", cwd=repo)
    assert not _error_colored(repo)
    assert not _error_colored(repo, env={"GIT_CONFIG_PARAMETERS": "'color.iterare=false'"})
