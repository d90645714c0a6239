"""Which of a run's changes would execute on the host once merged.

The sandbox keeps the agent away from the host while it runs; merging its work brings
files back that the host *runs*: git hooks, direnv files, editor tasks, build and test
configuration. :func:`host_executable_changes` names them so ``merge`` can show them
before merging. The list (:data:`PATH_RULES`, :data:`NAME_RULES`) is deliberately broad:
a false alarm costs a glance, a miss costs a compromised machine.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from git_iterare.repo import Repo
from git_iterare.workspace import common_git

#: Directory prefixes (from the top of the tree) and why files under them run on the host.
PATH_RULES: tuple[tuple[str, str], ...] = (
    (".git/", "git metadata (cannot come from a commit; listed for completeness)"),
    (".iterare/config.toml", "git iterare config: mounts, egress allowlist, Claude gateway of "
     "the next runs"),
    (".iterare/Dockerfile", "built by git iterare on your Docker engine before the next run"),
    (".iterare/include", "names host files git iterare copies into the next runs"),
    (".iterare/prompts/", "prompts of the next runs (frontmatter env: passes host secrets)"),
    (".cargo/", "cargo configuration (build runners, aliases)"),
    (".githooks/", "git hooks directory (used through core.hooksPath)"),
    (".husky/", "husky git hooks, run by git on commit/push"),
    (".vscode/tasks.json", "VS Code tasks, can run on folder open"),
    (".vscode/settings.json", "VS Code settings can name interpreters and tools it runs"),
    (".vscode/launch.json", "VS Code launch configurations"),
    (".vscode/extensions.json", "VS Code recommends extensions to install"),
    (".idea/", "JetBrains IDE project files (run configurations, startup tasks)"),
    (".devcontainer/", "dev container definition (commands run on create/attach)"),
    (".github/workflows/", "GitHub Actions workflows: run on CI with its secrets, not here"),
    (".gitlab-ci.yml", "GitLab CI pipeline: runs on CI with its secrets"),
)

#: File names matched in any directory, and why they run on the host.
NAME_RULES: dict[str, str] = {
    ".envrc": "direnv runs it when you cd into the directory",
    ".gitattributes": "selects filter/diff/merge drivers git runs on checkout and diff",
    ".gitmodules": "submodule URLs and update commands",
    ".pre-commit-config.yaml": "pre-commit hooks run on commit",
    "Makefile": "make recipes", "makefile": "make recipes", "GNUmakefile": "make recipes",
    "justfile": "just recipes", "Justfile": "just recipes",
    "Taskfile.yml": "task runner recipes",
    "package.json": "npm scripts (install/test lifecycle scripts run automatically)",
    ".npmrc": "npm configuration (scripts, registries)",
    ".yarnrc": "yarn configuration", ".yarnrc.yml": "yarn configuration and plugins",
    ".pnpmfile.cjs": "pnpm hooks run on install",
    "setup.py": "runs on pip install",
    "pyproject.toml": "build backend and tool configuration run by pip/pytest",
    "setup.cfg": "setuptools and tool configuration",
    "conftest.py": "imported by pytest",
    "noxfile.py": "nox sessions", "tox.ini": "tox commands",
    "Cargo.toml": "cargo build configuration", "build.rs": "cargo build script",
    "build.gradle": "gradle build script", "build.gradle.kts": "gradle build script",
    "settings.gradle": "gradle settings script", "pom.xml": "maven build (plugins)",
    "CMakeLists.txt": "cmake build script",
    "Rakefile": "rake tasks", "Gemfile": "bundler (evaluated as Ruby)",
    "docker-compose.yml": "compose file (host mounts, privileged containers)",
    "compose.yaml": "compose file (host mounts, privileged containers)",
    "compose.yml": "compose file (host mounts, privileged containers)",
    "docker-compose.yaml": "compose file (host mounts, privileged containers)",
    "tasks.json": "editor tasks (VS Code runs them, also in nested folders)",
    ".mise.toml": "mise tasks and hooks", "mise.toml": "mise tasks and hooks",
}


@dataclass(frozen=True)
class HostExecChange:
    """A changed file that would run (or make something run) on the host.

    Attributes:
        path: path in the tree, ``/``-separated.
        reason: why it matters, one short phrase.
    """

    path: str
    reason: str


def _hooks_path(repo: Repo) -> str | None:
    """``core.hooksPath`` as a tree-relative prefix ending in ``/``, when inside the tree."""
    result = common_git(repo, "config", "--get", "core.hooksPath", check=False)
    value = result.stdout.strip()
    if result.returncode != 0 or not value:
        return None
    top = repo.main_work_tree
    if value.startswith("/"):
        if top is None or not value.startswith(str(top) + "/"):
            return None
        value = value[len(str(top)) + 1:]
    value = posixpath.normpath(value)
    return None if value.startswith("..") else value.rstrip("/") + "/"


def classify(path: str, new_mode: str, hooks_prefix: str | None = None) -> str | None:
    """Why ``path`` (with git mode ``new_mode``, e.g. ``100755``) runs on the host, or None."""
    if hooks_prefix and path.startswith(hooks_prefix):
        return "git hooks directory named by core.hooksPath"
    for prefix, reason in PATH_RULES:
        if path.startswith(prefix) if prefix.endswith("/") else path == prefix:
            return reason
    name = posixpath.basename(path)
    if name in NAME_RULES:
        return NAME_RULES[name]
    if new_mode == "100755":
        return "executable file"
    if name.endswith(".sh"):
        return "shell script"
    return None


def host_executable_changes(repo: Repo, base: str, head: str) -> list[HostExecChange]:
    """Files added or modified between ``base`` and ``head`` that would run on the host.

    Args:
        repo: the user's repository.
        base: commit-ish the run started from.
        head: commit-ish of the run's result.

    Returns:
        Sorted by path; deleted files are not listed.

    Raises:
        ExternalError: git failed (an unknown commit, for instance).
    """
    hooks_prefix = _hooks_path(repo)
    out = common_git(repo, "diff", "--raw", "-z", "--no-renames", "--no-ext-diff",
                     "--no-textconv", base, head).stdout
    fields = out.split("\0")
    found = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.split()
        if len(parts) < 5 or parts[4] == "D":
            continue
        reason = classify(path, parts[1], hooks_prefix)
        if reason:
            found.append(HostExecChange(path=path, reason=reason))
    return sorted(found, key=lambda c: c.path)
