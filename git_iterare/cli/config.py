"""``git iterare config --list [--show-origin] [--format text|json]``."""

from __future__ import annotations

import json

import click

from git_iterare.cli.context import app


@click.command("config")
@click.option("--list", "-l", "list_", is_flag=True, help="List every key's effective value.")
@click.option("--show-origin", is_flag=True, help="Prefix each value with where it came from.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.argument("key", required=False)
def command(list_: bool, show_origin: bool, fmt: str, key: str | None) -> None:
    """Show the effective configuration (all keys with --list, or the value of KEY)."""
    from git_iterare.config import KEYS, format_value
    from git_iterare.errors import UserError

    config = app().config
    if key is not None:
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hint = f"did you mean {close[0]}?" if close else "see `git iterare config --list`"
            raise UserError(f"unknown key '{key}'", hint=hint)
        names = [key]
    elif list_:
        names = list(KEYS)
    else:
        raise UserError("give a KEY or --list", hint="see `git iterare config --list`")
    if fmt == "json":
        data = {n: {"value": config[n], "origin": config.origin(n)} for n in names}
        click.echo(json.dumps(data, indent=2))
        return
    for name in names:
        value = format_value(config[name])
        line = value if key is not None else f"{name}={value}"
        click.echo(f"{config.origin(name)}\t{line}" if show_origin else line)
