"""Layered configuration.

Layers, lowest to highest precedence (``git iterare config --list --show-origin`` shows
which one each effective value came from):

1. built-in defaults (:data:`KEYS`);
2. the global file ``$XDG_CONFIG_HOME/iterare/config.toml`` (``~/.config/iterare``), after
   iterare's own ``~/.iterare/config.toml`` when that exists, so its users keep their file;
3. the project file ``.iterare/config.toml`` of the worktree the command runs in (a linked
   worktree's own, see :attr:`git_iterare.git.repo.Repo.project_tree`);
4. ``git config iterare.<section>.<key>`` (all of git's files and ``git -c``); key names
   may use ``-`` or camelCase for ``_``, since git does not allow ``_`` in names;
5. ``ITERARE_<SECTION>_<KEY>`` environment variables;
6. command-line flags (passed in as ``overrides``).

TOML files are parsed with :mod:`tomllib` (``tomli`` before Python 3.11). Values from git
and the environment are strings, converted per key type: booleans as git reads them
(true/yes/on/1, false/no/off/0), lists as comma-separated items (git: one item per
value as well).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_iterare.errors import UserError, spelled
from git_iterare.settings import Key, global_config_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


DEFAULT_IMAGE = "git-iterare:latest"


def _agent_list() -> str:
    """The registered agents' names as prose: ``claude, codex, gemini or shell``."""
    from git_iterare.agents import names

    *most, last = names()
    return f"{', '.join(most)} or {last}" if most else last

#: The keys of git-iterare itself. Each agent declares its own (its section, such as
#: ``[claude]``, and its install version) as :attr:`git_iterare.agents.base.Agent.config_keys`;
#: :data:`KEYS` holds both. iterare's keys (docker.image, session.shell,
#: claude.credentials_path, firewall.allowed_domains, mounts.volumes) keep their names.
CORE_KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("docker.image", "str", DEFAULT_IMAGE,
            "Sandbox image; built by `git iterare image build` when missing."),
        Key("docker.context", "str", "",
            "Docker context to run on, between DOCKER_CONTEXT and the docker CLI's current "
            "context; read only from your own configuration, never the repository's."),
        Key("swarm.enabled", "bool", False,
            "Send runs to the Docker Swarm whose manager the selected engine is (each run a "
            "service of one task); read only from your own configuration."),
        Key("swarm.registry", "str", "",
            "Registry (HOST[:PORT]) the swarm's nodes pull the runs' images from, by digest; "
            "needed with swarm.enabled; read only from your own configuration."),
        Key("swarm.constraints", "list", [],
            "Placement constraints of the runs' services (node.labels.agents==yes); read "
            "only from your own configuration."),
        Key("swarm.snapshot_seconds", "int", 60,
            "How often a swarm run's task gives its work so far back, in seconds (what a "
            "node that dies keeps of it); 0: only when it ends; read only from your own "
            "configuration."),
        Key("docker.base_image", "str", "node:20-bookworm-slim",
            "Debian bookworm based image `git iterare image build` starts from."),
        Key("docker.agents", "list", ["claude"],
            "Agents installed in the sandbox image (`git iterare image build`); a run of "
            "another agent adds it to the image first."),
        Key("docker.network", "str", "",
            "Docker network to attach the sandbox to (default: a bridge network of its own)."),
        Key("docker.dns", "list", [],
            "Upstream DNS servers the sandbox resolver forwards allowlisted names to."),
        Key("docker.ca_bundle", "str", "",
            "CA bundle (PEM) passed into image builds and runs, for TLS-intercepting proxies."),
        Key("docker.cpus", "float", 2.0,
            "CPU limit of a run, in cores: 0.01 up to the engine's CPU count."),
        Key("docker.memory", "str", "4g",
            "Memory limit of a run: a number with b, k, m or g (512m, 4g), at least 6m. "
            "0 is refused: for no practical limit use a large value."),
        Key("docker.pids", "int", 1024,
            "Maximum number of processes in a run: 16 to 4194304 (0 is refused)."),
        Key("docker.warm", "bool", True,
            "Start-sooner work: the next run starts in a spare network sidecar (local "
            "engines) or a worktree checked out ahead (remote engines); false gives every "
            "run the plain launch."),
        Key("docker.spare_seconds", "int", 600,
            "When runs follow one another: how long a locked network sidecar, started "
            "after a run, waits for the next run in the repository (which then starts "
            "about 0.2 s sooner), 10 to 3600 seconds; 0 starts none. Runs on Docker's "
            "default bridge on a local engine only."),
        Key("run.agent", "str", "claude",
            f"Agent that runs prompts: {_agent_list()}."),
        Key("run.timeout", "int", 3600,
            "Wall-clock limit of a run, in seconds; 0 means no limit."),
        Key("run.max_budget_usd", "float", 0.0,
            "Spend limit of a run in US dollars, as its agent reports cost; the run is "
            "stopped when it is reached. 0 means no limit."),
        Key("run.max_turns", "int", 0,
            "Model turns a run may take before it is stopped; 0 means no limit."),
        Key("run.until", "str", "",
            "A check (a shell command) that runs in the sandbox after the agent ends; "
            "while it fails, the agent goes again with its output (`execute --until`). "
            "Empty: none."),
        Key("run.max_rounds", "int", 5,
            "Rounds a loop (`--until`) takes at most, 1 to 50."),
        Key("run.stall_after", "int", 2,
            "A loop ends as stalled after this many rounds in a row with the same failing "
            "check output, or the same tree; 0: never."),
        Key("session.shell", "str", "/bin/bash", "Shell for `git iterare interactive --shell`."),
        Key("firewall.allowed_domains", "list", [],
            "Extra domains the sandbox may reach; `*.example.com` matches subdomains."),
        Key("firewall.allowed_cidrs", "list", [],
            "Extra literal networks (CIDR) the sandbox may reach."),
        Key("mounts.volumes", "list", [],
            "Extra bind mounts, SOURCE:TARGET[:ro|rw], as in iterare."),
    )
}


class KeyTable(Mapping[str, Key]):
    """Every key git-iterare reads: :data:`CORE_KEYS`, then the keys the registered agents
    declare, each placed with the other keys of its section (so a generated config file has
    one table per section).

    The agents are asked once, at the first lookup of a key that is not a core key or the
    first walk over the table (:func:`git_iterare.agents.declared_keys`: the agent registry
    is the one place that knows which agents exist); looking up a core key imports no agent.
    """

    def __init__(self, core: Mapping[str, Key]):
        self._core = dict(core)
        self._all: dict[str, Key] | None = None

    def _table(self) -> dict[str, Key]:
        if self._all is None:
            from git_iterare.agents import declared_keys

            keys = list(self._core.values())
            for key in declared_keys():
                if key.name in self._core:
                    raise RuntimeError(f"agent key {key.name} is already a core key")
                keys.append(key)
            order = {section: i for i, section in
                     enumerate(dict.fromkeys(k.section for k in keys))}
            keys.sort(key=lambda k: order[k.section])  # stable: declaration order kept
            self._all = {k.name: k for k in keys}
        return self._all

    def __getitem__(self, name: str) -> Key:
        core = self._core.get(name)
        return core if core is not None else self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:
        return name in self._core or name in self._table()


#: Every key: :data:`CORE_KEYS` and the agents' own (see :class:`KeyTable`).
KEYS: Mapping[str, Key] = KeyTable(CORE_KEYS)

#: Keys only the user's own layers may set (global file, git config, environment,
#: flags): a value in the repository's ``.iterare/config.toml`` is ignored with a warning.
#: ``docker.context`` chooses which engine (and so which machine) gets the run; the
#: ``swarm`` keys send runs to a cluster and choose its registry and nodes.
USER_ONLY_KEYS = frozenset({"docker.context", "swarm.enabled", "swarm.registry",
                            "swarm.constraints", "swarm.snapshot_seconds"})

_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "list": "a list of strings",
}

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


def legacy_global_config(env: Mapping[str, str] | None = None) -> Path:
    """iterare's global file, ``~/.iterare/config.toml``, read below ours for compatibility."""
    return Path(os.path.expanduser("~")) / ".iterare" / "config.toml"


@dataclass(frozen=True)
class Setting:
    """An effective value and the layer it came from.

    Attributes:
        key: ``section.key``.
        value: converted to the key's type.
        origin: ``default``, ``file:<path>``, ``git:<origin>``, ``env:<NAME>`` or ``flag``.
    """

    key: str
    value: Any
    origin: str


@dataclass(frozen=True)
class Config:
    """Effective configuration: one :class:`Setting` per key in :data:`KEYS`.

    Attributes:
        settings: mapping ``section.key`` -> Setting.
        warnings: lines about unknown keys, to print as warnings.
    """

    settings: Mapping[str, Setting]
    warnings: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> Any:
        """The value of ``section.key``; KeyError for a key not in :data:`KEYS`."""
        return self.settings[name].value

    def origin(self, name: str) -> str:
        """Where the value of ``section.key`` came from (see :class:`Setting`)."""
        return self.settings[name].origin


def _convert(key: Key, value: Any, where: str, from_text: bool = False) -> Any:
    """Check or convert ``value`` for ``key``; ``where`` names the source in errors.

    TOML values are checked as they are; with ``from_text`` (git config, the environment,
    flags given as text) strings are converted to the key's type. Raises UserError naming
    the key and the expected type.
    """

    def bad(negative: bool = False) -> UserError:
        kind = ("a non-negative " + _TYPE_NAMES[key.type].split(" ", 1)[1] if negative
                else _TYPE_NAMES[key.type])
        return UserError(f"{where}: {key.name} must be {kind}, got {spelled(value)}")

    if from_text and isinstance(value, str) and key.type != "str":
        text = value.strip()
        if key.type == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        if key.type == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise bad()
        try:
            number = int(text) if key.type == "int" else float(text)
        except ValueError:
            raise bad() from None
        if not math.isfinite(number):
            raise bad()
        if number < 0:
            raise bad(negative=True)
        return number
    if key.type == "str" and isinstance(value, str):
        return value
    if key.type == "bool" and isinstance(value, bool):
        return value
    if key.type == "int" and isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise bad(negative=True)
        return value
    if key.type == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise bad()
        if value < 0:
            raise bad(negative=True)
        return float(value)
    if key.type == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise bad()


#: Most unknown keys of one config file warned about by name (with a suggestion each); the
#: rest are counted in one line (a repository's file may hold 100,000 of them).
MAX_UNKNOWN_NAMED = 20


def _suggest(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(KEYS), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _misspelt(where: str, name: str, meant: str) -> UserError:
    """The error for an unknown key ``name`` one edit away from the key ``meant``: every
    key changes what runs or where (``run.agnet`` would run the default agent), so a
    misspelt one stops the command instead of being a warning."""
    return UserError(f"{where}: unknown key {name}; did you mean {meant}?",
                     hint=f"{meant} changes what runs, so a misspelt one stops the command: "
                          "fix the key")


def _typo(name: str) -> str | None:
    """The key (``section.key``) that ``name`` is one edit away from (see
    :func:`git_iterare.settings.one_edit`), ``-``, ``_`` and case ignored as git config
    names ignore them; a name without a section (at the top of a file) is compared with
    the keys' names. None when no key is that close."""
    from git_iterare.settings import typo_of

    if "." not in name:
        found = typo_of(_normal(name), (_normal(key.key) for key in KEYS.values()))
        return next((k for k, key in KEYS.items() if _normal(key.key) == found), None)
    section, _, rest = name.partition(".")
    names = {f"{_normal(key.section)}.{_normal(key.key)}": k for k, key in KEYS.items()}
    found = typo_of(f"{_normal(section)}.{_normal(rest)}", names)
    return names[found] if found is not None else None


def parse_toml_file(path: Path, project: bool = False) -> dict[str, Any]:
    """Parse one TOML config file.

    Args:
        path: the file; a missing file gives an empty dict.
        project: it is the repository's ``.iterare/config.toml``: read only as a regular
            file of a ``.iterare`` folder that is no symlink, at most
            :data:`~git_iterare.limits.MAX_PROJECT_FILE_BYTES`
            (:func:`git_iterare.boundedfs.read_repository_file`).

    Returns:
        The parsed document.

    Raises:
        UserError: the file is not valid TOML, as ``file:line:col: message``, or nests
            deeper than the parser can follow; or it cannot be read (or, with
            ``project``, is a symlink or too large).
    """
    if project:
        from git_iterare.boundedfs import read_repository_file

        found = read_repository_file(path.parent, path.name)
        if found is None:
            return {}
        data = found
    else:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        loaded: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
        return loaded
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table.
        raise UserError(f"{path}: arrays or inline tables nested too deep to read") from None
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        match = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", msg)
        line = getattr(exc, "lineno", None) or (match and int(match.group(1))) or 1
        col = getattr(exc, "colno", None) or (match and int(match.group(2))) or 1
        text = getattr(exc, "msg", None) or (msg[: match.start()] if match else msg)
        if text == "Invalid statement" or not text:
            text = "invalid TOML statement"
        raise UserError(f"{path}:{line}:{col}: {_TOML_KEY.sub(_dotted_key, text)}") from None


#: A key as tomllib's messages print it: the repr of a tuple of strings (``('run',)``,
#: ``('a', 'b c')``), as in "Cannot declare ('run',) twice".
_TOML_KEY = re.compile(r"""\((?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
                       r"""(?:, (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"))*,?\)""")


def _dotted_key(match: re.Match[str]) -> str:
    """A key tomllib printed as a tuple, written as in a TOML file: ``a.b``, with parts
    that are not bare keys quoted (``a."b c"``)."""
    import ast
    import json

    try:
        parts = ast.literal_eval(match.group())
    except (ValueError, SyntaxError):
        return match.group()
    return ".".join(part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
                    for part in parts)


def _file_layer(
    path: Path, settings: dict[str, Setting], warnings: list[str], project: bool = False
) -> None:
    doc = parse_toml_file(path, project)
    unknown = 0

    def warn_unknown(name: str) -> None:
        nonlocal unknown
        meant = _typo(name)
        if meant is not None:
            raise _misspelt(str(path), name, meant)
        unknown += 1
        if unknown <= MAX_UNKNOWN_NAMED:
            warnings.append(f"{path}: unknown key {name}{_suggest(name)}")

    for section, table in doc.items():
        if not isinstance(table, dict):
            warn_unknown(section)
            continue
        for name, value in table.items():
            full = f"{section}.{name}"
            key = KEYS.get(full)
            if key is None:
                warn_unknown(full)
                continue
            if project and full in USER_ONLY_KEYS:
                warnings.append(f"{path}: {full} ignored: a repository cannot choose it "
                                f"(set it in your own config: "
                                f"git config --global iterare.{full} ...)")
                continue
            settings[full] = Setting(full, _convert(key, value, str(path)), f"file:{path}")
    if unknown > MAX_UNKNOWN_NAMED:
        warnings.append(f"{path}: and {unknown - MAX_UNKNOWN_NAMED} more unknown keys")


def _normal(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _by_normal_name(parts: tuple[str, str]) -> Key | None:
    """The key whose section and name are ``parts`` ignoring ``_``, ``-`` and case."""
    wanted = (_normal(parts[0]), _normal(parts[1]))
    for key in KEYS.values():
        if (_normal(key.section), _normal(key.key)) == wanted:
            return key
    return None


def _git_layer(
    entries: list[Any], settings: dict[str, Setting], warnings: list[str]
) -> None:
    lists: dict[str, list[str]] = {}
    for entry in entries:
        parts = entry.key.split(".")
        if parts[0] != "iterare":
            continue
        if len(parts) != 3:
            warnings.append(f"git config: unknown key {entry.key}")
            continue
        key = _by_normal_name((parts[1], parts[2]))
        if key is None:
            meant = _typo(f"{parts[1]}.{parts[2]}")
            if meant is not None:
                raise _misspelt(f"git config ({entry.origin.rstrip(':')})", entry.key,
                                f"iterare.{meant}")
            warnings.append(f"git config: unknown key {entry.key}")
            continue
        where = f"git config {entry.key} ({entry.origin})"
        value = _convert(key, entry.value, where, from_text=True)
        if key.type == "list":
            # Multi-valued git keys add up, lowest scope first, like git's own lists.
            value = lists.setdefault(key.name, []) + value
            lists[key.name] = value
        settings[key.name] = Setting(key.name, value, f"git:{entry.origin}")


def _env_layer(
    env: Mapping[str, str], settings: dict[str, Setting], warnings: list[str]
) -> None:
    for var, raw in env.items():
        if not var.startswith("ITERARE_") or var.count("_") < 2:
            continue
        _, section, name = var.split("_", 2)
        full = f"{section.lower()}.{name.lower()}"
        key = KEYS.get(full)
        if key is None:
            # Other ITERARE_* variables (ITERARE_NO_MAN, say) are not config; one whose
            # section is a config section is, when it is one edit from a key.
            meant = _typo(full) if any(k.section == section.lower() for k in
                                       KEYS.values()) else None
            if meant is not None:
                raise _misspelt("environment", var,
                                "ITERARE_" + meant.replace(".", "_").upper())
            continue
        value = _convert(key, raw, f"environment {var}", from_text=True)
        settings[full] = Setting(full, value, f"env:{var}")


def load(
    repo: Any | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    git_entries: list[Any] | None = None,
) -> Config:
    """Load the effective configuration.

    Args:
        repo: a :class:`git_iterare.git.repo.Repo` for the project file and git config, or
            None outside a repository (defaults, global file, git's global config, env).
        overrides: ``section.key`` -> value from command-line flags; None values skipped.
        env: environment; ``os.environ`` when None.
        git_entries: ``git config`` entries to use instead of asking git (for tests).

    Returns:
        The configuration with origins and warnings.

    Raises:
        UserError: bad TOML (``file:line:col: message``), a value of the wrong type
            (naming the key and the expected type), or an unknown key one edit away from
            a known one ("did you mean"; other unknown keys are warnings).
        ExternalError: ``git config`` failed.
    """
    env = os.environ if env is None else env
    settings = {name: Setting(name, key.default, "default") for name, key in KEYS.items()}
    warnings: list[str] = []
    _file_layer(legacy_global_config(env), settings, warnings)
    _file_layer(global_config_dir(env) / "config.toml", settings, warnings)
    if repo is not None and repo.project_tree is not None:
        _file_layer(repo.iterare_dir / "config.toml", settings, warnings, project=True)
    if git_entries is None:
        from git_iterare.proc import read_git_config

        cwd = repo.work_tree or repo.git_dir if repo is not None else None
        git_entries = read_git_config(r"^iterare\.", cwd=cwd)
    _git_layer(git_entries, settings, warnings)
    _env_layer(env, settings, warnings)
    for name, value in (overrides or {}).items():
        if value is not None:
            converted = _convert(KEYS[name], value, "flag", from_text=True)
            settings[name] = Setting(name, converted, "flag")
    return Config(settings=settings, warnings=tuple(warnings))


def format_value(value: Any) -> str:
    """Render a value for ``config --list``: lists comma-separated, booleans lower case."""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
