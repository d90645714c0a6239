"""What ``git iterare init`` and ``git iterare install`` write.

Kept apart from the commands so the text of each file is in one place and tests can
compare against it.
"""

from __future__ import annotations

import contextlib
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

from git_iterare.config import KEYS, format_value
from git_iterare.errors import UserError
from git_iterare.settings import global_config_dir

EXAMPLE_PROMPT = """\
---
# Optional YAML frontmatter (as in iterare): workspace names the run, branch is the base.
workspace: example
# branch: main         # base of the run (default: HEAD, the commit checked out)
# agent: claude        # or codex, or shell: run this body as a bash script
# timeout: 1800        # seconds
---

Read the README and fix any spelling mistakes you find. Commit your changes with a
clear message.
"""

DOCKERFILE = """\
# Project layer of the git-iterare sandbox image, built on top of the base image
# (`git iterare image build`) whenever this file changes. Install what your project
# needs to build and test here; the agent runs as the unprivileged user `agent`.
FROM {image}

# USER root
# RUN apt-get update && apt-get install -y --no-install-recommends python3-venv \\
#     && rm -rf /var/lib/apt/lists/*
# USER agent
"""

GITIGNORE = """\
# Run worktrees of git iterare: each is a checkout of its own branch iterare/<run>.
/worktrees/
"""


def config_template(header: str) -> str:
    """A config.toml with every key commented out at its default, grouped by section.

    Args:
        header: comment lines (without ``#``) put at the top.
    """
    lines = [f"# {h}" if h else "#" for h in header.splitlines()]
    section = None
    for key in KEYS.values():
        if key.section != section:
            section = key.section
            lines += ["", f"[{section}]"]
        for doc_line in textwrap.wrap(key.doc, 86):
            lines.append(f"# {doc_line}")
        default = key.default
        if isinstance(default, str):
            shown = '"' + default.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif isinstance(default, list):
            shown = "[" + ", ".join(f'"{v}"' for v in default) + "]"
        else:
            shown = format_value(default)
        lines.append(f"# {key.key} = {shown}")
    return "\n".join(lines) + "\n"


PROJECT_CONFIG = config_template(
    "git iterare project configuration (see `man git-iterare`).\n"
    "Every key is shown commented out at its built-in default. Values set here override\n"
    "the global file; `git config iterare.<section>.<key>`, ITERARE_<SECTION>_<KEY> and\n"
    "command-line flags override this file. `git iterare config --list --show-origin`\n"
    "shows the effective values."
)

GLOBAL_CONFIG = config_template(
    "git iterare global configuration: defaults for every repository.\n"
    "A project's .iterare/config.toml overrides these."
)


@dataclass(frozen=True)
class Written:
    """One file ``init`` or ``install`` handled: its path and what happened
    (``created``, ``overwritten`` or ``kept``)."""

    path: Path
    action: str


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` as a new file with ``mode`` (a temporary file renamed
    over it), so a symlink at ``path`` is replaced, never written through.

    Raises:
        OSError: it cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write(path: Path, text: str, force: bool, mode: int = 0o644) -> Written:
    # A symlink counts as an existing file (a repository may hold one pointing anywhere):
    # kept, or with ``force`` replaced by the file, never written through.
    existed = os.path.lexists(path)
    if existed and not force:
        return Written(path, "kept")
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, text.encode("utf-8"), mode)
    return Written(path, "overwritten" if existed else "created")


def init_project(top: Path, image: str, force: bool = False) -> list[Written]:
    """Create ``.iterare/`` in the worktree ``top``.

    Writes config.toml, Dockerfile (FROM ``image``), prompts/example.md and .gitignore
    (which keeps run worktrees out of ``git status``). Existing files are kept unless
    ``force``; nothing outside ``.iterare/`` is touched.

    Args:
        top: top of the main worktree.
        image: the base image name for the Dockerfile's FROM line.
        force: overwrite existing files.

    Returns:
        One :class:`Written` per file, in the order above.

    Raises:
        UserError: ``.iterare`` or ``.iterare/prompts`` exists and is not a directory
            (a symlink to one included).
    """
    root = top / ".iterare"
    for folder in (root, root / "prompts"):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise UserError(f"{folder} exists and is not a directory"
                            f"{' (it is a symlink)' if folder.is_symlink() else ''}; "
                            "move it away and rerun")
    return [
        _write(root / "config.toml", PROJECT_CONFIG, force),
        _write(root / "Dockerfile", DOCKERFILE.format(image=image), force),
        _write(root / "prompts" / "example.md", EXAMPLE_PROMPT, force),
        _write(root / ".gitignore", GITIGNORE, force),
    ]


def install_global(env: dict[str, str] | None = None) -> list[Written]:
    """Create the global directory (mode 0700) and a commented global config.toml.

    Returns:
        What was done to the directory and the file.
    """
    folder = global_config_dir(env)
    existed = folder.is_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return [
        Written(folder, "kept" if existed else "created"),
        _write(folder / "config.toml", GLOBAL_CONFIG, False, 0o600),
    ]
