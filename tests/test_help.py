"""Help: manual pages for every command and option, ``--help``, ``-h`` and ``git help``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import click
import pytest

from git_iterare.cli import manpage
from git_iterare.cli.main import cli
from git_iterare.cli.registry import COMMANDS
from git_iterare.config import KEYS
from tests.conftest import git, iterare

MAN_DIR = Path(__file__).resolve().parent.parent / "man"
SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "CONFIGURATION", "FILES",
            "EXIT STATUS", "EXAMPLES", "SEE ALSO"]


def _sections(page: Path) -> dict[str, str]:
    text = page.read_text()
    parts = re.split(r"^\.SH (.+)$", text, flags=re.M)
    return {name.strip('"'): body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _roff_option(opt: str) -> str:
    return opt.replace("-", r"\-")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_a_complete_page(name: str) -> None:
    page = MAN_DIR / f"git-iterare-{name}.1"
    assert page.is_file(), f"man page missing for {name}"
    sections = _sections(page)
    assert [s for s in SECTIONS if s not in sections] == []
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    options = sections["OPTIONS"]
    missing = [opt for p in command.params if isinstance(p, click.Option) and not p.hidden
               for opt in p.opts if opt.startswith("--") and _roff_option(opt) not in options]
    assert missing == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_starts_a_tagged_paragraph(name: str) -> None:
    # A tag line (".BI \\-n ...") without the ".TP" before it runs into the paragraph of
    # the option above (execute's -n once read as part of --stall-after).
    lines = _sections(MAN_DIR / f"git-iterare-{name}.1")["OPTIONS"].splitlines()
    untagged = [line for before, line in itertools.pairwise(lines)
                if line.startswith(".BI \\-") and before not in (".TP", ".TQ")]
    assert untagged == []


def test_main_page_lists_every_command_and_key() -> None:
    sections = _sections(MAN_DIR / "git-iterare.1")
    for name in COMMANDS:
        assert f".B {_roff_option(name)}\n" in sections["COMMANDS"], name
    for key in KEYS:
        assert f".B {key}\n" in sections["CONFIGURATION"], key
    for status in ("0", "1", "2", "130"):
        assert f".B {status}\n" in sections["EXIT STATUS"]


def test_help_opens_the_manual(repo: Path) -> None:
    result = iterare("--help", cwd=repo, env={"MANPAGER": "cat", "MANWIDTH": "80"})
    assert result.returncode == 0
    assert result.stdout.startswith("GIT-ITERARE(1)")
    sub = iterare("config", "--help", cwd=repo, env={"MANPAGER": "cat"})
    assert sub.stdout.startswith("GIT-ITERARE-CONFIG(1)")


def test_git_help_finds_the_pages(repo: Path) -> None:
    result = git("help", "iterare-init", cwd=repo, env={"MANPAGER": "cat", "PATH": _path()})
    assert result.stdout.startswith("GIT-ITERARE-INIT(1)")


def _path() -> str:
    import os

    return os.environ["PATH"]


def test_without_man_the_same_text_is_printed(repo: Path) -> None:
    result = iterare("init", "--help", cwd=repo, env={"ITERARE_NO_MAN": "1"})
    assert result.returncode == 0
    assert result.stdout == manpage.render_text((MAN_DIR / "git-iterare-init.1").read_text())
    assert result.stdout.splitlines()[:5] == [
        "GIT-ITERARE-INIT(1)", "", "", "NAME",
        "       git-iterare-init - set up .iterare/ in a repository"]
    assert ("\n       --force, -f\n           Overwrite the files above when they exist, also a "
            "configuration file\n           that no longer parses.\n") in result.stdout


@pytest.mark.parametrize("name", ["", *sorted(COMMANDS)])
def test_dash_h_is_clicks_own_help_option(name: str) -> None:
    # A help option of our own, built to skip click's gettext lookup, saved a few
    # milliseconds a start (measured as whole processes) and was removed.
    command = cli if not name else cli.get_command(click.Context(cli), name)
    assert command is not None
    assert "get_help_option" not in vars(command)
    assert type(command).get_help_option is click.Command.get_help_option
    option = command.get_help_option(click.Context(command, **command.context_settings))
    assert option is not None and option.opts == ["-h"]
    assert [p.opts for p in command.params if p.name == "help"] == [["--help"]]


def test_dash_h_prints_short_usage(repo: Path) -> None:
    result = iterare("init", "-h", cwd=repo)
    assert result.returncode == 0
    assert result.stdout.startswith("Usage: git iterare init [OPTIONS] [PATH]\n")
    assert "--force" in result.stdout


def _value_options(command: click.Command, path: str) -> list[tuple[str, str, str]]:
    """``(command path, option, metavar)`` of every option taking a value, subcommands too."""
    ctx = click.Context(command)
    found = []
    for p in command.params:
        if isinstance(p, click.Option) and not p.is_flag and not p.hidden:
            record = p.get_help_record(ctx)  # ("-v, --verbosity LEVEL", help), as -h shows
            assert record is not None
            found.append((path, p.opts[0], record[0].split(" ", len(p.opts))[-1]))
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found += _value_options(sub, f"{path} {name}")
    return found


def test_dash_h_names_each_value_as_the_manual_does() -> None:
    # `-h` shows what an option takes as one word (LEVEL, BASE) or its choices; neither
    # the name of the value's type ("WHOLE NUMBER OF VERBOSITY LEVEL") nor click's
    # generic TEXT.
    bad = [(path, opt, metavar) for path, opt, metavar in _value_options(cli, "git iterare")
           if not re.fullmatch(r"[A-Z]+|\[[a-z-]+(\|[a-z-]+)*\]", metavar) or metavar == "TEXT"]
    assert bad == []
