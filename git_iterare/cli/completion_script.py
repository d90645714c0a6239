"""Shell completion scripts that plug into git's own completion.

* bash: git's completion (git-completion.bash) calls ``_git_<cmd>`` for ``git <cmd>``, so
  we define ``_git_iterare`` using its helpers (``__gitcomp``, ``__git_find_on_cmdline``,
  ``__git``) and register ``git-iterare`` with ``__git_complete``.
* zsh: zsh's ``_git`` calls ``_git-<cmd>`` for user commands named in the
  ``user-commands`` style; we define ``_git-iterare``.
* fish: fish's git completion provides ``__fish_git_using_command``.

Subcommands and options are written into the script when it is generated; prompt names
(files in ``.iterare/prompts``) and run ids (``git for-each-ref refs/iterare/runs``) are
looked up by the shell at completion time without starting Python.
"""

from __future__ import annotations

import importlib

import click

from git_iterare.cli.registry import COMMANDS

SHELLS = ("bash", "zsh", "fish")

#: Argument names whose values complete to prompt names or run ids.
PROMPT_ARGS = {"prompt", "prompts"}
RUN_ARGS = {"run", "runs"}


def _command(name: str) -> click.Command:
    from git_iterare.cli.main import cli

    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None, name
    return command


def command_options(name: str) -> list[tuple[str, str, bool]]:
    """The long and short options of subcommand ``name``.

    Returns:
        ``(option, help, takes_value)`` for every option string, ``--help`` included.
    """
    options = []
    for param in _command(name).params:
        if isinstance(param, click.Option):
            takes_value = not param.is_flag and not param.count
            for opt in [*param.opts, *param.secondary_opts]:
                options.append((opt, (param.help or "").split(".")[0], takes_value))
    options.append(("-h", "Show short usage", False))
    return options


def argument_kind(name: str) -> str:
    """``prompt``, ``run`` or ``""``: what the positional arguments of ``name`` complete to."""
    for param in _command(name).params:
        if isinstance(param, click.Argument):
            if param.name in PROMPT_ARGS:
                return "prompt"
            if param.name in RUN_ARGS:
                return "run"
    return ""


def _bash() -> str:
    names = sorted(COMMANDS)
    cases = []
    for name in names:
        opts = " ".join(o + ("=" if takes and o.startswith("--") else "")
                        for o, _, takes in command_options(name) if o.startswith("--"))
        kind = argument_kind(name)
        values = {"prompt": "$(__git_iterare_prompts)", "run": "$(__git_iterare_runs)"}
        arg = f'__gitcomp_nl "{values[kind]}"' if kind else ":"
        cases.append(
            f"\t{name})\n\t\tcase \"$cur\" in\n\t\t--*) __gitcomp \"{opts}\" ;;\n"
            f"\t\t*) {arg} ;;\n\t\tesac ;;"
        )
    body = "\n".join(cases)
    return f"""\
# bash completion for git iterare; load after git's completion, e.g. in ~/.bashrc:
#   source <(git iterare completion bash)
__git_iterare_prompts ()
{{
\tlocal top
\ttop=$(__git rev-parse --show-toplevel 2>/dev/null) || return
\tlocal f
\tfor f in "$top"/.iterare/prompts/*.md; do
\t\t[ -e "$f" ] || continue
\t\tf=${{f##*/}}
\t\tprintf '%s\\n' "${{f%.md}}"
\tdone
}}

__git_iterare_runs ()
{{
\t__git for-each-ref --sort=-committerdate --format='%(refname:strip=3)' \\
\t\trefs/iterare/runs 2>/dev/null
}}

_git_iterare ()
{{
\tlocal subcommands="{' '.join(names)}"
\tlocal subcommand
\tsubcommand=$(__git_find_on_cmdline "$subcommands")
\tif [ -z "$subcommand" ]; then
\t\tcase "$cur" in
\t\t--*) __gitcomp "--version --color= --verbose --help" ;;
\t\t*) __gitcomp "$subcommands" ;;
\t\tesac
\t\treturn
\tfi
\tcase "$subcommand" in
{body}
\tesac
}}

if declare -F __git_complete >/dev/null 2>&1; then
\t__git_complete git-iterare _git_iterare
fi
"""


def _zsh_quote(text: str) -> str:
    return text.replace("'", "'\\''").replace("[", "\\[").replace("]", "\\]").replace(":", "\\:")


def _zsh() -> str:
    names = sorted(COMMANDS)
    described = " ".join(f"'{n}:{_zsh_quote(COMMANDS[n][1])}'" for n in names)
    cases = []
    for name in names:
        specs = " ".join(
            f"'{o}[{_zsh_quote(h)}]" + (":value:" if takes else "") + "'"
            for o, h, takes in command_options(name)
        )
        kind = argument_kind(name)
        arg = {"prompt": "'*:prompt:__git_iterare_prompts'",
               "run": "'*:run:__git_iterare_runs'"}.get(kind, "")
        cases.append(f"    {name}) _arguments {specs} {arg} ;;")
    body = "\n".join(cases)
    return f"""\
# zsh completion for git iterare (zsh's own _git): add to ~/.zshrc:
#   source <(git iterare completion zsh)
zstyle ':completion:*:*:git:*' user-commands iterare:'run a coding agent in a sandbox'

__git_iterare_prompts () {{
  local top
  top=$(git rev-parse --show-toplevel 2>/dev/null) || return
  local -a prompts
  prompts=( "$top"/.iterare/prompts/*.md(N:t:r) )
  compadd -a prompts
}}

__git_iterare_runs () {{
  local -a runs
  runs=( ${{(f)"$(git for-each-ref --format='%(refname:strip=3)' refs/iterare/runs 2>/dev/null)"}} )
  compadd -a runs
}}

_git-iterare () {{
  local curcontext=$curcontext state line
  _arguments -C '--version[print the version]' '--color=[color output]:when:(auto always never)' \\
    '--verbose[echo commands]' '--help[open the manual]' \\
    '1:command:->command' '*::argument:->argument'
  case $state in
  command)
    local -a commands
    commands=( {described} )
    _describe -t commands 'git iterare command' commands ;;
  argument)
    case $line[1] in
{body}
    esac ;;
  esac
}}
"""


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish() -> str:
    names = sorted(COMMANDS)
    lines = [
        "# fish completion for git iterare: git iterare completion fish | source",
        "function __git_iterare_prompts",
        "    set -l top (git rev-parse --show-toplevel 2>/dev/null); or return",
        "    for f in $top/.iterare/prompts/*.md",
        "        basename $f .md",
        "    end",
        "end",
        "function __git_iterare_runs",
        "    git for-each-ref --format='%(refname:strip=3)' refs/iterare/runs 2>/dev/null",
        "end",
        "complete -f -c git -n __fish_git_needs_command -a iterare "
        "-d 'Run a coding agent in a sandbox'",
    ]
    top = "__fish_git_using_command iterare; and not __fish_seen_subcommand_from " + " ".join(
        names
    )
    for name in names:
        lines.append(f"complete -f -c git -n '{top}' -a {name} -d {_fish_quote(COMMANDS[name][1])}")
    for name in names:
        cond = f"'__fish_git_using_command iterare; and __fish_seen_subcommand_from {name}'"
        for opt, help_text, takes in command_options(name):
            flag = f"-l {opt[2:]}" if opt.startswith("--") else f"-s {opt[1:]}"
            req = " -r" if takes else ""
            lines.append(f"complete -f -c git -n {cond} {flag}{req} -d {_fish_quote(help_text)}")
        kind = argument_kind(name)
        if kind:
            lines.append(f"complete -f -c git -n {cond} -a '(__git_iterare_{kind}s)'")
    return "\n".join(lines) + "\n"


def script(shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`).

    Raises:
        ValueError: an unknown shell.
    """
    generators = {"bash": _bash, "zsh": _zsh, "fish": _fish}
    if shell not in generators:
        raise ValueError(shell)
    importlib.invalidate_caches()
    return generators[shell]()
