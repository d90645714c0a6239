"""The command line as git runs it: names, repository discovery, exit statuses."""

from __future__ import annotations

import os
from pathlib import Path

from git_iterare import __version__
from git_iterare.cli.registry import COMMANDS
from tests.conftest import BIN_DIR, git, iterare


def test_version_works_outside_a_repository(tmp_path: Path) -> None:
    result = iterare("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"git iterare version {__version__}\n", "")


def test_bare_invocation_lists_every_command(repo: Path) -> None:
    result = iterare(cwd=repo)
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.split("Commands:\n")[1].splitlines()
              if line.startswith("  ") and not line.startswith("   ")]
    assert listed == sorted(COMMANDS)


def test_image_alone_lists_its_subcommands_like_git_iterare_alone(tmp_path: Path) -> None:
    result = iterare("image", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    # click writes COMMAND or [COMMAND] depending on its version
    assert result.stdout.startswith("Usage: git iterare image [OPTIONS] ")
    listed = [line.split()[0] for line in result.stdout.split("Commands:\n")[1].splitlines()
              if line.startswith("  ") and not line.startswith("   ")]
    assert listed == ["build", "status"]


def test_unknown_command_names_the_nearest_and_exits_2(repo: Path) -> None:
    result = iterare("confg", cwd=repo)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == ("error: 'confg' is not a git iterare command; the nearest is "
                             "'config' (see `git iterare -h`)\n")


def test_an_unknown_command_like_no_other_names_none(repo: Path) -> None:
    result = iterare("bogus", cwd=repo)
    assert (result.returncode, result.stderr) == (
        2, "error: 'bogus' is not a git iterare command (see `git iterare -h`)\n")


def test_unknown_option_is_a_usage_error(repo: Path) -> None:
    result = iterare("config", "--bogus", cwd=repo)
    assert result.returncode == 2
    assert result.stderr == ("error: No such option '--bogus'. Did you mean '--verbose'? "
                             "(see 'git iterare config -h')\n")


def test_usage_errors_are_one_line_without_clicks_layout(tmp_path: Path) -> None:
    result = iterare("completion", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "^J" not in result.stderr and "^I" not in result.stderr
    assert result.stderr.startswith("error: Missing argument '{bash|zsh|fish}'. Choose from: "
                                    "bash,")


def test_every_command_has_an_executable_and_all_spellings_agree(repo: Path) -> None:
    for name in COMMANDS:
        assert os.access(BIN_DIR / f"git-iterare-{name}", os.X_OK), name
    expected = iterare("config", "docker.image", cwd=repo)
    assert expected.returncode == 0
    for argv in (["git", "iterare-config"], [str(BIN_DIR / "git-iterare-config")]):
        import subprocess

        got = subprocess.run([*argv, "docker.image"], cwd=repo, capture_output=True, text=True)
        assert (got.returncode, got.stdout) == (0, expected.stdout)


def _set_image(repo: Path, image: str) -> None:
    (repo / ".iterare").mkdir(exist_ok=True)
    (repo / ".iterare" / "config.toml").write_text(f'[docker]\nimage = "{image}"\n')


def test_works_from_a_subdirectory(repo: Path) -> None:
    _set_image(repo, "sub:1")
    (repo / "a" / "b").mkdir(parents=True)
    assert iterare("config", "docker.image", cwd=repo / "a" / "b").stdout == "sub:1\n"


def test_works_from_a_linked_worktree_using_the_main_project_file(repo: Path, tmp_path: Path
                                                                  ) -> None:
    _set_image(repo, "main:1")
    linked = tmp_path / "linked"
    git("worktree", "add", "-q", str(linked), "-b", "side", cwd=repo)
    assert iterare("config", "docker.image", cwd=linked).stdout == "main:1\n"


def test_works_with_git_dash_C(repo: Path, tmp_path: Path) -> None:
    _set_image(repo, "dashc:1")
    result = git("-C", str(repo), "iterare", "config", "docker.image", cwd=tmp_path)
    assert result.stdout == "dashc:1\n"


def test_works_with_GIT_DIR_and_GIT_WORK_TREE(repo: Path, tmp_path: Path) -> None:
    _set_image(repo, "gitdir:1")
    env = {"GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo)}
    assert iterare("config", "docker.image", cwd=tmp_path, env=env).stdout == "gitdir:1\n"


def test_git_dash_c_overrides_config(repo: Path) -> None:
    _set_image(repo, "file:1")
    result = git("-c", "iterare.docker.image=flag:2", "iterare", "config", "--show-origin",
                 "docker.image", cwd=repo)
    assert result.stdout == "git:command line:\tflag:2\n"


def test_outside_a_repository_a_command_needing_one_exits_2(tmp_path: Path) -> None:
    result = iterare("init", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "error: not a git repository (run git iterare inside one, or use git -C <path>)\n")


def test_unreadable_config_is_a_user_error_not_a_traceback(repo: Path) -> None:
    path = repo / ".iterare" / "config.toml"
    path.mkdir(parents=True)
    result = iterare("config", "--list", cwd=repo)
    assert (result.returncode, result.stderr) == (
        2, f"error: {path} is not a regular file; refusing to read it\n")


def test_diff_finds_the_runs_among_git_diff_arguments() -> None:
    from git_iterare.cli.diff import split_runs

    assert split_runs(["--stat", "fix-0123abcd"]) == (["fix-0123abcd"], ["--stat"])
    assert split_runs(["fix-0123abcd", "-U1", "--", "a.txt"]) == (["fix-0123abcd"],
                                                                 ["-U1", "--", "a.txt"])
    assert split_runs(["--stat", "--", "a.txt"]) == ([], ["--stat", "--", "a.txt"])
    # Two runs: from the first's result to the second's; a path after -- is no run.
    assert split_runs(["a-0123abcd", "--stat", "b-0123abcd", "--", "c"]) == (
        ["a-0123abcd", "b-0123abcd"], ["--stat", "--", "c"])
    assert split_runs(["a-0123abcd", "--", "b-0123abcd"]) == (
        ["a-0123abcd"], ["--", "b-0123abcd"])
    # The value of an option that takes one is no run (git diff -S TEXT, --output FILE).
    assert split_runs(["a-0123abcd", "-S", "needle", "--output", "x.diff"]) == (
        ["a-0123abcd"], ["-S", "needle", "--output", "x.diff"])
    assert split_runs(["-G", "re", "a-0123abcd", "-Sneedle", "b-0123abcd"]) == (
        ["a-0123abcd", "b-0123abcd"], ["-G", "re", "-Sneedle"])


def test_execute_and_interactive_share_one_declaration_of_the_network_options() -> None:
    import importlib

    import click

    def declared(module: str) -> list[dict[str, object]]:
        command = importlib.import_module(f"git_iterare.cli.{module}").command
        return [param.to_info_dict() for param in command.params
                if isinstance(param, click.Option) and param.name in ("networks", "compose")]

    options = declared("execute")
    assert [o["opts"] for o in options] == [["--docker-network", "--dn"],
                                            ["--docker-compose", "--dc"]]
    assert declared("interactive") == options
    # Declared once, in cli/context.py.
    sources = (Path(__file__).parent.parent / "git_iterare" / "cli").glob("*.py")
    assert [p.name for p in sources if '"--docker-network"' in p.read_text()] == ["context.py"]


def test_ctrl_c_where_nothing_goes_on_says_interrupted(repo: Path) -> None:
    """A command stopped by Ctrl-C before it did anything (here: waiting for a token on
    stdin) says so in one line and exits 130, not silently."""
    import contextlib
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([str(BIN_DIR / "git-iterare"), "credentials", "--agent", "codex"],
                            cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # Past start-up (which takes long on a loaded machine): it waits on stdin, in a
        # read(2) of fd 0 (/proc/PID/syscall: "0 0x0 ..." on x86-64).
        syscall = Path(f"/proc/{proc.pid}/syscall")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if syscall.read_text().startswith("0 0x0 "):
                    break
            time.sleep(0.1)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted"
