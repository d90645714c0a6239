"""Prompt files: Markdown with optional YAML frontmatter.

The format is iterare's (``.iterare/prompts/<name>.md``)::

    ---
    workspace: my-task      # iterare: name of the run (default: the file name)
    branch: main            # iterare: base branch to start from
    agent: claude           # ours: agent that runs it (default: run.agent)
    timeout: 1800           # ours: wall-clock limit in seconds
    env: [NPM_TOKEN]        # ours: host variables passed into the sandbox, by name
    max_budget_usd: 2.5     # ours: stop the run when the agent has spent this (dollars)
    max_turns: 40           # ours: stop the run after this many model turns
    until: make test        # ours: loop until this check passes in the sandbox
    ---

    The task, in plain words.

Frontmatter is optional; when present it starts on the first line with ``---`` and ends
at the next line holding only ``---``. iterare files load unchanged (``---`` then ``---``
is an empty frontmatter). Unlike iterare, broken frontmatter is an error here rather
than silently ignored, since a dropped ``timeout`` or ``branch`` would change the run.

Line endings are normalized before anything else, for every agent: CRLF and lone CR become
LF, and a leading byte order mark is dropped (files saved by Windows editors), so a shell
agent never sees ``\r`` at the end of its lines and frontmatter fences are found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_iterare.errors import OperationFailed, UserError, spelled

#: Keys iterare defines, then ours.
FRONTMATTER_KEYS = ("workspace", "branch", "agent", "timeout", "env", "max_budget_usd",
                    "max_turns", "until")
#: The keys that change what runs (which agent, from which base, with which variables, for
#: how long or how much): an unknown key one edit away from one of these stops the run
#: (``agnet: shell`` would run the default agent, with the user's money), other unknown
#: keys are warnings. ``workspace`` only names the run.
RUN_DECIDING_KEYS = ("agent", "branch", "timeout", "env", "max_budget_usd", "max_turns",
                     "until")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_FENCE = re.compile(r"---[ \t]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Prompt:
    """A parsed prompt file.

    Attributes:
        name: the file name without ``.md``; the default run name.
        path: the file, absolute.
        body: the text after the frontmatter, leading blank lines dropped, never empty.
        given_run_name: the run name frontmatter ``workspace`` gives (iterare's key), or
            None.
        branch: frontmatter ``branch`` (base branch), or None.
        agent: frontmatter ``agent``, or None for the configured ``run.agent``.
        timeout: frontmatter ``timeout`` in seconds (0: no limit), or None for ``run.timeout``.
        env: names of host environment variables to pass into the sandbox.
        max_budget_usd: frontmatter ``max_budget_usd``, US dollars (0: no limit), or None
            for ``run.max_budget_usd``.
        max_turns: frontmatter ``max_turns`` (0: no limit), or None for ``run.max_turns``.
        until: frontmatter ``until`` (a check: a shell command run in the sandbox), or
            None for ``run.until``.
        warnings: ``file:line: message`` lines (unknown keys) for the caller to print.
    """

    name: str
    path: Path
    body: str
    given_run_name: str | None = None
    branch: str | None = None
    agent: str | None = None
    timeout: int | None = None
    env: tuple[str, ...] = ()
    max_budget_usd: float | None = None
    max_turns: int | None = None
    until: str | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def run_name(self) -> str:
        """The name runs of this prompt get: :attr:`given_run_name` when set, else
        :attr:`name`."""
        return self.given_run_name or self.name


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a prompt, or None when it can.

    Prompt names become run names, so the rule is the run names' one
    (:func:`git_iterare.runs.ids.name_problem`): they end up in branch names, ref names
    and paths.
    """
    from git_iterare.runs.ids import name_problem as run_name_problem

    return run_name_problem(name)


def env_name_problem(name: Any) -> str | None:
    """Why ``name`` is not an environment variable name (``[A-Za-z_][A-Za-z0-9_]*``)."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        return f"{name!r} is not a variable name (letters, digits and _, not starting with a digit)"
    return None


def _branch_problem(branch: str) -> str | None:
    if not branch or branch.startswith(("-", "/")) or branch.endswith(("/", ".lock", ".")):
        return "is not a valid branch name"
    if ".." in branch or "//" in branch or "@{" in branch or _CONTROL.search(branch):
        return "is not a valid branch name"
    if any(c.isspace() or c in "~^:?*[\\" for c in branch):
        return "is not a valid branch name"
    return None


def list_prompts(prompts_dir: Path) -> list[str]:
    """Names of the prompts in ``prompts_dir`` (``*.md`` without the suffix), sorted."""
    if not prompts_dir.is_dir():
        return []
    return sorted(p.stem for p in prompts_dir.glob("*.md") if p.is_file())


def resolve(arg: str, prompts_dir: Path, cwd: Path) -> Path:
    """Find the file ``arg`` names.

    ``arg`` is a prompt name (``fix-tests`` or ``fix-tests.md`` under ``prompts_dir``) or a
    path, relative to ``cwd`` or absolute. A plain name is looked up in ``prompts_dir``
    first, then as a file in ``cwd``; anything holding a slash is a path.

    Raises:
        UserError: no such prompt (listing the available ones) or not a file.
    """
    if not arg:
        raise UserError("no prompt given", hint="give a prompt name or a file")
    candidates: list[Path] = []
    if "/" not in arg and "\\" not in arg:
        stem = arg[:-3] if arg.endswith(".md") else arg
        candidates.append(prompts_dir / f"{stem}.md")
    candidates.append(Path(arg) if Path(arg).is_absolute() else cwd / arg)
    for candidate in candidates:
        # A repository could point a prompt (or its folder) anywhere: at a key, at
        # /proc/self/environ. Its content goes into the sandbox and the run record.
        # A relative path is checked in every folder it passes (`.iterare/x/key.md`,
        # `.iterare/x` a symlink); an absolute one is the user's own choice but for the file.
        steps = Path(arg).parts if not Path(arg).is_absolute() else ()
        passed = [cwd.joinpath(*steps[:n]) for n in range(1, len(steps))]
        links = [p for p in (candidate, candidate.parent, candidate.parent.parent)
                 if p.is_symlink()] if candidate.parent == prompts_dir else (
            [p for p in (*passed, candidate) if p.is_symlink()])
        if links and (candidate.exists() or candidate.is_symlink()):
            raise UserError(f"{links[0]} is a symlink; git iterare reads prompts only from "
                            "regular files", hint="give the file it points to, if you trust it")
        if candidate.is_file():
            return candidate.resolve()
    if candidates[-1].exists():
        raise UserError(f"{arg}: not a file")
    available = list_prompts(prompts_dir)
    listing = ", ".join(available) if available else f"none in {prompts_dir}"
    raise UserError(f"no prompt '{arg}' (available: {listing})",
                    hint="create .iterare/prompts/<name>.md or give a file path")


def split_frontmatter(text: str, where: str) -> tuple[str | None, int, str, int]:
    """Split a prompt file into frontmatter and body.

    Args:
        text: the whole file.
        where: the file name for errors.

    Returns:
        ``(yaml_text, yaml_first_line, body, body_first_line)``; ``yaml_text`` is None when
        there is no frontmatter. Line numbers are 1-based lines of the file.

    Raises:
        UserError: the opening ``---`` has no closing ``---`` line.
    """
    lines = text.splitlines(keepends=True)
    if not lines or not _FENCE.match(lines[0].rstrip("\r\n")):
        return None, 0, text, 1
    for index in range(1, len(lines)):
        if _FENCE.match(lines[index].rstrip("\r\n")):
            return "".join(lines[1:index]), 2, "".join(lines[index + 1:]), index + 2
    raise UserError(f"{where}:1: frontmatter is not closed by a '---' line")


#: A frontmatter line whose value YAML reads as plain text (``agent: shell``): a key, and
#: a value that starts with a letter and holds no character YAML gives a meaning to.
_PLAIN_LINE = re.compile(r"([a-z_]+): +([A-Za-z][A-Za-z0-9_./-]*) *")
#: Plain words YAML 1.1 (PyYAML's SafeLoader) reads as booleans or null, not text.
_YAML_WORDS = frozenset(
    f(w) for w in ("yes", "no", "true", "false", "on", "off", "null", "y", "n")
    for f in (str.lower, str.title, str.upper))


def _plain_frontmatter(yaml_text: str, first_line: int
                       ) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The mapping and key lines of frontmatter made only of ``key: word`` lines whose
    words YAML reads as text, without importing YAML (about a tenth of ``execute``'s
    start); None for anything else, which :func:`_parse_yaml` reads with YAML."""
    data: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for offset, line in enumerate(yaml_text.split("\n")):
        if not line:
            continue
        match = _PLAIN_LINE.fullmatch(line)
        if match is None or match[2] in _YAML_WORDS:
            return None
        data[match[1]] = match[2]
        lines[match[1]] = first_line + offset
    return (data, lines) if data else None


def _parse_yaml(
    yaml_text: str, first_line: int, where: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse frontmatter; return the mapping and the file line of each key.

    The repository wrote it: it is refused when over
    :data:`~git_iterare.limits.MAX_FRONTMATTER_BYTES`, and composed under
    :data:`~git_iterare.limits.MAX_YAML_NODES` and :data:`~git_iterare.limits.MAX_YAML_DEPTH`
    without anchors or aliases (:func:`git_iterare.boundedyaml.compose`), before anything
    is built from it.
    """
    from git_iterare import limits as lim

    size = len(yaml_text.encode("utf-8", "surrogateescape"))
    if size > lim.MAX_FRONTMATTER_BYTES:
        raise UserError(f"{where}:{first_line}: the frontmatter is {size} bytes, more than "
                        f"{lim.MAX_FRONTMATTER_BYTES // 1024} KiB (MAX_FRONTMATTER_BYTES)",
                        hint="keep the frontmatter to its keys; the task goes below it")
    plain = _plain_frontmatter(yaml_text, first_line)
    if plain is not None:
        return plain
    import yaml

    from git_iterare.boundedyaml import compose

    try:
        data, node = compose(yaml_text, max_nodes=lim.MAX_YAML_NODES,
                             max_depth=lim.MAX_YAML_DEPTH)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = first_line + (mark.line if mark else 0)
        raise UserError(f"{where}:{line}: bad YAML in frontmatter: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{where}:{first_line}: bad YAML in frontmatter: {exc}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise UserError(f"{where}:{first_line}: frontmatter must be a mapping of key: value")
    lines = {
        str(key.value): first_line + key.start_mark.line
        for key, _ in node.value
        if isinstance(key, yaml.ScalarNode)
    }
    return data, lines


def _scalar_text(value: Any) -> Any:
    """A number or date where text is wanted, as text (iterare used ``workspace: 123`` as
    the name "123"); other values are returned as they are, for the caller to refuse."""
    import datetime

    if isinstance(value, (int, float, datetime.date)) and not isinstance(value, bool):
        return str(value)
    return value


def _typed(data: Mapping[str, Any], lines: Mapping[str, int], where: str
           ) -> tuple[dict[str, Any], list[str]]:
    """Check each frontmatter value; return the typed fields and warnings."""
    fields: dict[str, Any] = {}
    warnings: list[str] = []

    def fail(key: str, message: str) -> UserError:
        return UserError(f"{where}:{lines.get(key, 1)}: {key} {message}")

    for key, value in data.items():
        if key not in FRONTMATTER_KEYS:
            from git_iterare.settings import typo_of

            meant = typo_of(str(key), RUN_DECIDING_KEYS)
            if meant is not None:
                raise UserError(f"{where}:{lines.get(str(key), 1)}: unknown key {key!r}; "
                                f"did you mean {meant!r}?",
                                hint=f"{meant} changes what runs, so a misspelt one stops "
                                     "the run: fix the frontmatter")
            import difflib

            close = difflib.get_close_matches(str(key), FRONTMATTER_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            warnings.append(f"{where}:{lines.get(str(key), 1)}: unknown key {key!r}{hint}")
            continue
        if value is None:
            continue
        if key in ("timeout", "max_turns"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                unit = "seconds" if key == "timeout" else "turns"
                raise fail(key, f"must be a whole number of {unit} (0: no limit), "
                                f"got {spelled(value)}")
            fields[key] = value
        elif key == "max_budget_usd":
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 <= value < float("inf")):
                raise fail(key, "must be a number of US dollars (0: no limit), "
                                f"got {spelled(value)}")
            fields[key] = float(value)
        elif key == "env":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list):
                raise fail(key, f"must be a list of variable names, got {value!r}")
            for name in names:
                problem = env_name_problem(name)
                if problem:
                    raise fail(key, problem)
            fields[key] = tuple(dict.fromkeys(names))
        elif key == "until":
            if not isinstance(value, str) or not value.strip():
                raise fail(key, f"must be a shell command, got {spelled(value)}")
            fields[key] = value
        else:
            if key in ("workspace", "branch"):
                value = _scalar_text(value)
            if not isinstance(value, str):
                raise fail(key, f"must be a string, got {value!r}")
            if key == "branch":
                problem = _branch_problem(value)
                if problem:
                    raise fail(key, f"{value!r} {problem}")
            elif problem := name_problem(value):
                from git_iterare.runs.ids import shown_name

                raise fail(key, f"{shown_name(value)}: {problem}")
            fields[key] = value
    return fields, warnings


def normalize_newlines(text: str) -> str:
    """``text`` with CRLF and lone CR turned into LF and a leading byte order mark dropped."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def parse(text: str, path: Path) -> Prompt:
    """Parse the text of prompt file ``path`` (line endings normalized first, see
    :func:`normalize_newlines`).

    Raises:
        UserError: ``file:line: message`` for broken YAML, a value of the wrong type, an
            unknown key one edit away from one of :data:`RUN_DECIDING_KEYS` ("did you
            mean"), an unclosed frontmatter, a bad file name or an empty body.
    """
    text = normalize_newlines(text)
    where = str(path)
    name = path.name[:-3] if path.name.endswith(".md") else path.name
    problem = name_problem(name)
    if problem:
        from git_iterare.runs.ids import shown_name

        raise UserError(f"{where}: prompt name {shown_name(name)}: {problem}",
                        hint="rename the file")
    yaml_text, yaml_line, body, body_line = split_frontmatter(text, where)
    fields: dict[str, Any] = {}
    warnings: list[str] = []
    if yaml_text is not None:
        data, lines = _parse_yaml(yaml_text, yaml_line, where)
        fields, warnings = _typed(data, lines, where)
    if not body.strip():
        raise UserError(f"{where}:{body_line}: the prompt is empty",
                        hint="write the task after the frontmatter")
    body = body.lstrip("\n")
    if "workspace" in fields:  # iterare's name for it
        fields["given_run_name"] = fields.pop("workspace")
    return Prompt(name=name, path=path, body=body, warnings=tuple(warnings), **fields)


def load_prompt(arg: str, prompts_dir: Path, cwd: Path) -> Prompt:
    """Find and parse a prompt (see :func:`resolve` and :func:`parse`).

    Args:
        arg: a prompt name under ``prompts_dir`` (with or without ``.md``) or a file path.
        prompts_dir: the project's ``.iterare/prompts``.
        cwd: what relative paths are relative to.

    Returns:
        The prompt; unknown frontmatter keys are in ``Prompt.warnings``.

    Raises:
        UserError: no such prompt, unreadable or not UTF-8, or bad content.
    """
    from git_iterare.boundedfs import TooLarge, read_regular
    from git_iterare.limits import MAX_PROMPT_BYTES

    path = resolve(arg, prompts_dir, cwd)
    try:
        text = read_regular(path, MAX_PROMPT_BYTES, limit_name="MAX_PROMPT_BYTES").decode(
            "utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except TooLarge:
        raise UserError(f"{path}: larger than {MAX_PROMPT_BYTES // 1024} KiB "
                        "(MAX_PROMPT_BYTES)", hint="shorten the prompt") from None
    except OperationFailed as exc:  # a FIFO or other special file
        raise UserError(f"{path}: {exc.message}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse(text, path)
