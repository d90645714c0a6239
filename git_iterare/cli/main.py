"""Entry point: ``git iterare <cmd>``, ``git iterare-<cmd>`` and ``git-iterare-<cmd>``.

Subcommands are imported only when run (see :mod:`git_iterare.cli.registry`), so
``--version``, ``-h`` and completion stay as cheap as importing click.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from git_iterare import __version__
from git_iterare.cli.registry import COMMANDS
from git_iterare.errors import ExitCode, IterareError, UserError

BUG_URL = "https://github.com/git-iterare/git-iterare/issues"
#: The values of ``--color``.
COLOR_WHENS = ("auto", "always", "never")


def _set_color(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from git_iterare import ui

        ui.COLOR_FLAG = value
        ui.reset()


def _set_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from git_iterare.runner.session import set_verbose

        set_verbose()


def _set_context(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from git_iterare.cli.context import app

        app().overrides["docker.context"] = value


def _set_swarm(ctx: click.Context, param: click.Parameter, value: bool | None) -> None:
    if value is not None:
        from git_iterare.cli.context import app

        app().overrides["swarm.enabled"] = value


def _open_manual(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from git_iterare.cli import manpage

    name = "git-iterare" if ctx.parent is None else f"git-iterare-{ctx.info_name}"
    ctx.exit(manpage.show(name))


def common_options() -> list[click.Parameter]:
    """Options every command takes: ``--color``, ``--verbose`` and ``--help`` (the manual).

    ``-h`` stays click's short usage.
    """
    return [
        click.Option(["--color"], type=click.Choice(COLOR_WHENS),
                     is_flag=False, flag_value="always", default=None, expose_value=False,
                     is_eager=True, callback=_set_color,
                     help="Color output: auto (terminals only), always or never."),
        click.Option(["--verbose"], is_flag=True, expose_value=False, is_eager=True,
                     callback=_set_verbose, help="Echo the commands git-iterare runs."),
        click.Option(["--help"], is_flag=True, expose_value=False, is_eager=True,
                     callback=_open_manual, help="Open the manual page."),
    ]


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"git_iterare.cli.{COMMANDS[cmd_name][0]}")
        from git_iterare import gcpause

        if cmd_name not in gcpause.RESUMED_AFTER_LAUNCH:
            gcpause.resume()
        command: click.Command = module.command
        if not any(p.name == "help" for p in command.params):
            command.params.extend(common_options())
            command.context_settings.setdefault("help_option_names", ["-h"])
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name not in COMMANDS and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            hint = f"; the nearest is '{close[0]}'" if close else ""
            raise UserError(f"'{name}' is not a git iterare command{hint}",
                            hint="see `git iterare -h`")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Summaries come from the registry, so listing imports no command module.
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def group_options() -> list[click.Parameter]:
    """:func:`common_options`, with iterare's ``-v`` for ``--verbose`` before the command
    (``git iterare -v execute ...``); after it, ``-v`` is a command's own."""
    options = common_options()
    for option in options:
        if option.name == "verbose" and isinstance(option, click.Option):
            option.opts.append("-v")
    return options


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h"]},
    params=[*group_options(),
            click.Option(["--context"], metavar="NAME", default=None, expose_value=False,
                         callback=_set_context,
                         help="Docker context to use ([docker] context); DOCKER_HOST and "
                              "DOCKER_CONTEXT still come first."),
            click.Option(["--swarm/--no-swarm"], default=None, expose_value=False,
                         callback=_set_swarm,
                         help="Send runs to the swarm the engine manages ([swarm] "
                              "enabled), or not.")],
)
@click.version_option(__version__, message="%(prog)s version %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run an autonomous coding agent on a prompt in a firewalled Docker sandbox.

    'git iterare --help' opens the manual; 'git iterare COMMAND --help' opens the
    command's page.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _spell_color(args: list[str]) -> list[str]:
    """``args`` with every ``--color`` option written as ``--color=WHEN``.

    ``--color WHEN`` (a separate value, as click takes option values) and ``--color=WHEN``
    both give WHEN; a bare ``--color`` (followed by anything else: a command, another
    option, nothing) means ``always``, as in git. Click alone would take the word after a
    bare ``--color`` as its value, and without this ``--color always list`` ran a command
    named "always".
    """
    spelled: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--color":
            when = "always"
            if index < len(args) and args[index] in COLOR_WHENS:
                when = args[index]
                index += 1
            word = f"--color={when}"
        spelled.append(word)
    return spelled


def _prog_and_args(argv: list[str]) -> tuple[str, list[str]]:
    """Map how we were started to click's arguments.

    ``git-iterare-list ARGS`` (also reached as ``git iterare-list``) means
    ``git-iterare list ARGS``.
    """
    base = os.path.basename(argv[0]) if argv else "git-iterare"
    args = list(argv[1:])
    end = args.index("--") if "--" in args else len(args)
    args[:end] = _spell_color(args[:end])
    if base.startswith("git-iterare-") and base[len("git-iterare-"):] in COMMANDS:
        return "git iterare", [base[len("git-iterare-"):], *args]
    return "git iterare", args


def link_source_pages() -> None:
    """Make a source checkout's pages visible to ``man`` and ``git help``.

    setuptools' editable installs (``pip install -e .``) carry no data files, so the pages
    in ``man/`` never reach ``<sys.prefix>/share/man``, where man-db looks for the commands
    on PATH. Run on every start: for an installed package it costs one ``stat``; in a
    checkout it links pages that are missing (silently skipped when the prefix is not
    writable). Plain ``os`` calls: this runs before every command, ``--version`` too.
    """
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(__file__)))), "man")
    if not os.path.isfile(os.path.join(source, "git-iterare.1")):
        return
    target = os.path.join(sys.prefix, "share", "man")
    try:
        for page in os.scandir(source):
            section = os.path.splitext(page.name)[1][1:]
            if not section.isdigit():
                continue
            folder = os.path.join(target, f"man{section}")
            link = os.path.join(folder, page.name)
            if os.path.lexists(link):
                continue
            os.makedirs(folder, exist_ok=True)
            os.symlink(page.path, link)
    except OSError:
        pass


def run(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (``sys.argv`` when None) and return the exit status.

    User errors print one line (exit 2 or 1); failures of tools we ran print one line
    (exit 1); Ctrl-C exits 130; anything else is a bug and prints a traceback.
    """
    prog, args = _prog_and_args(sys.argv if argv is None else argv)
    link_source_pages()
    try:
        cli.main(args=args, prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:  # Ctrl-C at one of click's prompts
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        import re

        from git_iterare import ui

        # click lays some messages out on lines (choices after a newline and a tab): one line
        message = re.sub(r"[ \t\n]+", " ", exc.format_message()).strip()
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            ui.error(f"{message} (see '{exc.ctx.command_path} -h')")
        else:
            ui.error(message)
        return ExitCode.USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except IterareError as exc:
        from git_iterare import ui

        ui.error(exc.render())
        return exc.exit_code
    except KeyboardInterrupt:
        # Commands that keep something going say so themselves (log -f, merge); here
        # nothing did, and a bare exit would leave the user guessing.
        from git_iterare.runner.interrupts import end_on_next_interrupt

        end_on_next_interrupt()
        print("\ninterrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # `git iterare list | head`: the reader left; not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.OK
    except Exception as exc:
        from git_iterare.runner.interrupts import caused_by_interrupt

        if caused_by_interrupt(exc):  # a library failed its own way on Ctrl-C
            print("\ninterrupted", file=sys.stderr)
            return ExitCode.INTERRUPTED
        unreadable = _unreadable_git_config(exc)
        if unreadable is not None:
            from git_iterare import ui

            ui.error(unreadable.render())
            return unreadable.exit_code
        import traceback

        traceback.print_exc()
        print(f"git iterare {__version__}: this is a bug; please report it with the "
              f"traceback above at {BUG_URL}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


def _unreadable_git_config(exc: BaseException) -> UserError | None:
    """The one-line error for a git config file dulwich could not read (the user's
    ``~/.gitconfig`` of mode 000, say: dulwich reads it for the identity of a reflog
    entry, where git would skip it), or None when ``exc`` is something else."""
    if not isinstance(exc, OSError) or not exc.filename:
        return None
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename.replace(os.sep, "/").endswith("dulwich/config.py"):
            path = os.fsdecode(exc.filename)
            return UserError(f"cannot read the git config file {path}: "
                             f"{exc.strerror or 'unreadable'}",
                             hint=f"make it readable with `chmod u+r {path}`, or move it away")
        frame = frame.tb_next
    return None


def entry(*_: Any) -> None:
    """Console entry point for ``bin/git-iterare`` and ``bin/git-iterare-<cmd>``."""
    try:
        code: int | str | None = run()
    except SystemExit as exc:  # a command that ends itself (execute -f, log -f)
        code = exc.code
    # Ctrl-C from now on would only cut the interpreter's clean-up short (a traceback from
    # an atexit handler).
    from git_iterare.runner.interrupts import end_on_next_interrupt

    end_on_next_interrupt()
    sys.exit(code)
