"""What this repository asks the sandbox for, and the approval gate (``git iterare trust``).

The repository is untrusted (see DESIGN.md, invariant 5). What it asks for beyond the
defaults acts only once the user approved its exact content:

* the project config keys in :data:`GATED_KEYS`, when their effective value comes from
  ``.iterare/config.toml`` (a value from the user's global file, git config,
  ``ITERARE_*`` variables or flags is the user's own);
* ``.iterare/Dockerfile``, unless it is exactly what ``git iterare init`` writes, or
  names nothing but iterare's image (what ``iterare init`` writes, comments aside);
* ``.iterare/include`` (files of the worktree, untracked ones such as ``.env``
  included, copied into every run's worktree), as the item ``.iterare/include``;
* the host variables a prompt's frontmatter ``env`` passes into the sandbox (``--env``
  flags are the user's own);
* the repository's own settings for the agents that start programs (Claude Code's hooks
  and MCP servers, Gemini CLI's, Codex's project layer: each agent's
  :meth:`~git_iterare.agents.base.Agent.repository_settings`), read from the tree a run
  starts from (HEAD, or the run's base), as items named by the file and key
  (``.claude/settings.json hooks``).

Approvals are kept by :class:`git_iterare.sandbox.approvals.TrustStore` in the user's config
directory (``<config dir>/trust``), keyed by the path of the worktree whose project files
they approve (:attr:`git_iterare.git.repo.Repo.project_tree`: the one the command runs in,
so a linked worktree's checkout of them is approved on its own).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from git_iterare.boundedfs import read_repository_file
from git_iterare.config import DEFAULT_IMAGE, Config
from git_iterare.errors import UserError
from git_iterare.git.repo import Repo
from git_iterare.limits import MAX_PROJECT_FILE_BYTES
from git_iterare.sandbox.approvals import (
    DOCKERFILE,
    Approval,
    TrustRequest,
    TrustStore,
    diff,
    merged,
    unapproved,
)
from git_iterare.settings import global_config_dir

#: Project config keys that widen the sandbox, or choose what is built, mounted or sent
#: into it: the images (git-iterare's own image also runs the network sidecar), networks,
#: DNS, the CA bundle given to builds and runs, the egress allowlist, mounts, and the
#: resource limits, timeout, spare sidecar's lifetime and a loop's rounds when they are
#: above the built-in ones (a loop's rounds cost what the agent spends). The agents' own
#: keys marked ``gated`` (their gateways, whose hosts are allowlisted, install versions
#: and credentials directories) join them: see :func:`gated_keys`.
GATED_KEYS: tuple[str, ...] = (
    "docker.image", "docker.base_image", "docker.network",
    "docker.dns", "docker.ca_bundle", "firewall.allowed_cidrs", "firewall.allowed_domains",
    "mounts.volumes", "docker.cpus", "docker.memory", "docker.pids", "run.timeout",
    "docker.spare_seconds", "run.max_rounds", "run.stall_after",
)


def gated_keys() -> tuple[str, ...]:
    """:data:`GATED_KEYS` and every agent key declared ``gated``."""
    from git_iterare.config import KEYS

    return (*GATED_KEYS, *(k.name for k in KEYS.values() if k.gated and k.name not in GATED_KEYS))


def _narrows(key: str, value: object, default: object) -> bool:
    """Whether a project's limit only narrows the built-in one (needs no approval)."""
    from git_iterare.sandbox.spec import memory_bytes

    try:
        if key == "docker.memory":
            return memory_bytes(str(value)) <= memory_bytes(str(default))
        if key == "run.timeout":
            return isinstance(value, int) and isinstance(default, int) and 0 < value <= default
        if key == "docker.spare_seconds":
            return isinstance(value, int) and isinstance(default, int) and 0 <= value <= default
        if key == "run.max_rounds":
            return isinstance(value, int) and isinstance(default, int) and 1 <= value <= default
        if key == "run.stall_after":  # 0 and 1 never stall: more rounds
            return isinstance(value, int) and isinstance(default, int) and 2 <= value <= default
        if key in ("docker.cpus", "docker.pids"):
            return (isinstance(value, (int, float)) and isinstance(default, (int, float))
                    and value <= default)
    except (TypeError, ValueError, UserError):
        return False
    return False

#: What the refusal without a terminal says before the list of items.
NOT_APPROVED = "this repository asks for settings you have not approved"


@dataclass(frozen=True)
class TrustState:
    """What a repository asks for, against what the user approved.

    Attributes:
        repo: the repository's key in the store (its project worktree, resolved).
        request: what it asks for now.
        approval: what was approved last, or None.
        missing: items of ``request`` not approved (config keys, ``Dockerfile``,
            ``env NAME``); empty when all is approved.
    """

    repo: str
    request: TrustRequest
    approval: Approval | None
    missing: tuple[str, ...]

    @property
    def diff(self) -> str:
        """Unified diff from the approved content to the request ("" when the same)."""
        return diff(self.approval, merged(self.approval, self.request))


def store() -> TrustStore:
    """The approval store in the user's config directory."""
    return TrustStore(global_config_dir() / "trust")


def repo_key(repo: Repo) -> str:
    """The store's key of ``repo``: the path of its
    :attr:`~git_iterare.git.repo.Repo.project_tree`, symlinks resolved.

    Raises:
        UserError: the repository is bare.
    """
    return str(repo.iterare_dir.parent.resolve())


def _project_file(repo: Repo) -> str:
    return f"file:{repo.iterare_dir / 'config.toml'}"


def requested_settings(repo: Repo, config: Config) -> dict[str, object]:
    """The :func:`gated_keys` whose effective value comes from the project file and is not
    the default; for ``firewall.allowed_domains`` only entries beyond the built-in ones."""
    from git_iterare.config import KEYS
    from git_iterare.sandbox.image import is_legacy_image
    from git_iterare.sandbox.policy import BASE_DOMAINS

    project = _project_file(repo)
    out: dict[str, object] = {}
    for key in gated_keys():
        if config.origin(key) != project:
            continue
        value = config[key]
        if key == "firewall.allowed_domains":
            value = [d for d in value if d.lower() not in BASE_DOMAINS]
        if key == "docker.image" and is_legacy_image(value):
            continue  # iterare's image stands for git-iterare's own: asks for nothing
        if value != KEYS[key].default and not _narrows(key, value, KEYS[key].default):
            out[key] = value
    return out


#: Item name of ``.iterare/include`` in the request.
INCLUDE = ".iterare/include"


def scaffold_dockerfiles(config: Config) -> set[str]:
    """The Dockerfiles ``git iterare init`` writes (FROM the configured or default image),
    which ask for nothing."""
    from git_iterare.scaffold import DOCKERFILE as TEMPLATE

    return {TEMPLATE.format(image=image) for image in (config["docker.image"], DEFAULT_IMAGE)}


def requested_dockerfile(repo: Repo, config: Config) -> str | None:
    """The project Dockerfile's text, or None when there is none or it is the scaffold.

    Raises:
        UserError: it cannot be read, is a symlink or is larger than
            :data:`~git_iterare.limits.MAX_PROJECT_FILE_BYTES`.
    """
    data = read_repository_file(repo.iterare_dir, "Dockerfile")
    if data is None:
        return None
    text = data.decode("utf-8", "surrogateescape")
    if text in scaffold_dockerfiles(config):
        return None
    from git_iterare.sandbox.image import legacy_dockerfile

    legacy = legacy_dockerfile(text, config["docker.image"])
    # iterare's scaffold (its image and comments) builds nothing: git-iterare's image runs.
    return None if legacy is not None and legacy.names_only else text


def prompts_env(repo: Repo, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Environment names asked for by the prompts in ``.iterare/prompts`` and by the
    prompts ``extra`` names (names or files); prompts that do not parse are skipped.

    Raises:
        UserError: a prompt in ``extra`` does not exist or does not parse.
    """
    from git_iterare.prompt import list_prompts, load_prompt

    folder = repo.iterare_dir / "prompts"
    names: list[str] = []
    for name in list_prompts(folder):
        try:
            names += load_prompt(name, folder, Path.cwd()).env
        except UserError:
            continue
    for arg in extra:
        names += load_prompt(arg, folder, Path.cwd()).env
    return tuple(dict.fromkeys(names))


def prompt_checks(repo: Repo, config: Config) -> list[tuple[str, str]]:
    """The loop checks (``until``) that runs would run: ``(where, check)`` for each prompt
    in ``.iterare/prompts`` that sets one (prompts that do not parse are skipped), and
    ``run.until`` when set. They need no approval (a check runs in the sandbox only, as
    the agent does); ``trust --show`` shows them."""
    from git_iterare.prompt import list_prompts, load_prompt

    folder = repo.iterare_dir / "prompts"
    found: list[tuple[str, str]] = []
    for name in list_prompts(folder):
        try:
            until = load_prompt(name, folder, Path.cwd()).until
        except UserError:
            continue
        if until:
            found.append((f"prompt {name}", until))
    if config["run.until"]:
        found.append(("run.until", config["run.until"]))
    return found


def requested_agent_settings(repo: Repo, base: str | None = None,
                             agents: Collection[str] | None = None) -> dict[str, object]:
    """What the repository's configuration of the agents asks for that starts programs:
    :meth:`~git_iterare.agents.base.Agent.repository_settings` of every agent, from the
    files of ``base``'s tree (what a run's worktree is checked out from). Nothing when
    there is no such commit yet (a repository without commits).

    Args:
        repo: the repository.
        base: the commit (hex, or any name git resolves); HEAD of the worktree the
            command runs in when None.
        agents: the names of the agents whose settings count; every agent when None.

    Raises:
        UserError: one of the files is a symbolic link (the agent would read whatever it
            points to) or larger than :data:`~git_iterare.limits.MAX_PROJECT_FILE_BYTES`.
    """
    from git_iterare import proc
    from git_iterare.agents import get_agent, names
    from git_iterare.git.repo import read_blobs

    commit = base or "HEAD"
    readers = [get_agent(name) for name in names() if agents is None or name in agents]
    paths = sorted({path for agent in readers for path in agent.settings_files})
    if not paths:
        return {}
    # The folders they are in too: a folder that is a symbolic link (or a submodule) hands
    # the agent files the listing of the path itself never shows.
    folders = sorted({str(parent) for path in paths for parent in PurePosixPath(path).parents
                      if str(parent) != "."})
    # On the current worktree's gitdir: HEAD is the linked worktree's own there.
    listed = proc.git("--git-dir", str(repo.git_dir), "ls-tree", "-z", "--end-of-options",
                      commit, "--", *folders, *paths, scrub_git_env=True, check=False)
    blobs: dict[str, str] = {}  # path -> blob id
    for entry in listed.stdout.split("\0") if listed.returncode == 0 else ():
        meta, _, path = entry.partition("\t")
        mode, kind, sha = [*meta.split(), "", "", ""][:3]
        if path in folders and mode in ("120000", "160000"):
            raise UserError(f"{path} in {commit} is a "
                            f"{'symbolic link' if mode == '120000' else 'submodule'}: the "
                            "agent would read settings from it that nobody approved",
                            hint=f"make {path} a folder of the repository")
        if path not in paths or kind != "blob":
            continue
        if mode == "120000":
            raise UserError(f"{path} in {commit} is a symbolic link: the agent would read "
                            "what it points to, which nobody approved",
                            hint=f"make {path} a regular file in the repository")
        blobs[path] = sha
    content = read_blobs(repo, sorted(set(blobs.values())), MAX_PROJECT_FILE_BYTES)
    for path, sha in blobs.items():
        if isinstance(content.get(sha), int):
            raise UserError(f"{path} in {commit}: larger than "
                            f"{MAX_PROJECT_FILE_BYTES // 1024} KiB", hint="keep it small")
    items: dict[str, object] = {}
    for agent in readers:
        files = {path: body for path in agent.settings_files
                 if path in blobs and isinstance(body := content.get(blobs[path]), bytes)}
        if files:
            items.update(agent.repository_settings(files))
    return items


def gather(repo: Repo, config: Config, prompt_env: Iterable[str] = (), *,
           base: str | None = None, agents: Collection[str] | None = None) -> TrustRequest:
    """What ``repo`` asks for beyond the defaults (see the module docstring).

    Args:
        repo: the repository.
        config: its effective configuration.
        prompt_env: variable names asked for by prompt frontmatter.
        base: the commit whose agent settings count (:func:`requested_agent_settings`);
            HEAD when None.
        agents: the agents whose settings count; all when None.

    Raises:
        UserError: the Dockerfile or an agent's settings file cannot be read or is too
            large; the repository is bare.
    """
    from git_iterare.runner.workspace import read_include

    settings = requested_settings(repo, config)
    includes = read_include(repo)  # as the run's worktree preparation reads them
    if includes:
        settings[INCLUDE] = includes
    settings.update(requested_agent_settings(repo, base, agents))
    return TrustRequest.build(settings, requested_dockerfile(repo, config), prompt_env)


def state(repo: Repo, config: Config, prompt_env: Iterable[str] = (), *,
          base: str | None = None, agents: Collection[str] | None = None) -> TrustState:
    """The repository's request (the settings of ``agents``, all when None, from ``base``,
    HEAD when None) against its stored approval.

    Raises:
        UserError: see :func:`gather`.
    """
    key = repo_key(repo)
    request = gather(repo, config, prompt_env, base=base, agents=agents)
    approval = store().load(key)
    missing = unapproved(request, approval)
    # The Dockerfile first: it is the largest grant.
    ordered = [m for m in missing if m == DOCKERFILE] + [m for m in missing if m != DOCKERFILE]
    return TrustState(key, request, approval, tuple(ordered))


def approve(current: TrustState) -> Approval:
    """Store the approval of ``current.request`` (names approved earlier stay approved).

    Raises:
        OperationFailed: the store cannot be written.
    """
    from git_iterare.errors import OperationFailed

    try:
        return store().save(current.repo, merged(current.approval, current.request))
    except OSError as exc:
        raise OperationFailed(f"cannot store the approval in {store().root}: "
                              f"{exc.strerror or exc}") from None


def revoke(repo: Repo) -> bool:
    """Forget the approval of ``repo``; True when there was one."""
    return store().revoke(repo_key(repo))


def render(current: TrustState) -> str:
    """The summary for people: what is asked for, and what changed since the last
    approval. Control characters from the repository are made visible."""
    from git_iterare.ui import sanitize

    lines = [f"repository: {current.repo}"]
    if current.request.empty:
        lines.append("asks for nothing beyond the defaults")
        return sanitize("\n".join(lines))
    lines.append("asks for (from .iterare/config.toml, Dockerfile, include, prompts and agent "
                 "settings):")
    lines += [f"  {line}" for line in current.request.lines()]
    if not current.missing:
        lines.append("all of it is approved")
    elif current.approval is None:
        lines.append("not approved yet")
    else:
        lines.append(f"changed since your approval of {current.approval.approved_at}:")
        lines += [f"  {line}" for line in current.diff.splitlines()]
    return sanitize("\n".join(lines))


Ask = Callable[[str], bool]


def _on_terminal() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _ask_terminal(summary: str) -> bool:
    """Show ``summary`` on stderr and read y/N from stdin (anything but y/yes is no)."""
    sys.stderr.write(summary + "\nApprove this for the repository and go on? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def require_approval(repo: Repo | None, config: Config, prompt_env: Sequence[str] = (), *,
                     only: Collection[str] | None = None, ask: Ask | None = None,
                     base: str | None = None, agents: Collection[str] | None = None) -> None:
    """The gate: return when what ``repo`` asks for is approved, else ask or refuse.

    Call it before anything is created and before the project Dockerfile is built. On a
    terminal (stdin and stderr are ttys) the summary is shown and y/N asked, as direnv's
    ``allow`` and editors' workspace trust do; yes stores the approval. Without one, or
    with any other answer (the default is no), it is refused.

    Args:
        repo: the repository, or None (outside one nothing is asked for).
        config: its effective configuration.
        prompt_env: variable names the prompt's frontmatter passes in (not ``--env``).
        only: consider only these items (config keys, ``Dockerfile``, ``env NAME``).
        ask: called with the summary to ask the user; default: the terminal, when there
            is one.
        base: the commit a run starts from, whose agent settings count; HEAD when None.
        agents: the agents whose settings count (the one a run starts); all when None.

    Raises:
        UserError: something is not approved and there is no terminal, or the user
            answered no (naming the items and ``git iterare trust``).
    """
    if repo is None or repo.project_tree is None:
        return
    # Items named in ``only`` are never an agent's settings: those are not read then.
    current = state(repo, config, prompt_env, base=base,
                    agents=agents if only is None else ())
    missing = [m for m in current.missing if only is None or m in only]
    if not missing:
        return
    if ask is None and _on_terminal():
        ask = _ask_terminal
    # No terminal, or the answer no (the default): one refusal naming what is asked for.
    if ask is None or not ask(render(current)):
        raise UserError(f"{NOT_APPROVED} ({', '.join(missing)}); review them with "
                        f"`git iterare trust`")
    approve(current)
