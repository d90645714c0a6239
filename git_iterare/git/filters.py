"""Which attributes and filter programs count when the host checks out or commits a run.

A run's files are converted the way the user's own git converts them (clean and smudge
filters such as Git LFS or git-crypt, ``ident``, ``text``/``eol``, ``core.autocrlf``), but
what decides it must never be the agent's:

* *Filter programs* come from the user's git config only (``filter.<driver>.*`` as
  ``git config`` reads it in the user's repository: system, global, repository). The run
  gitdir's config and anything in the worktree are never read.
* *Attributes* come from a trusted commit (:func:`trusted_commit`): the run's base when
  the user's own branches, tags or HEAD reach it, else (``execute --reuse``, whose base is
  an earlier run's result) the newest commit of the user's history below it. Its
  ``.gitattributes`` files are rewritten into one ``info/attributes`` text
  (:func:`attributes_text`), which beats every ``.gitattributes`` in the worktree; its
  first line resets the attributes that convert content, so a ``.gitattributes`` the
  agent wrote or changed has no effect on the host. The user's ``core.attributesFile``
  and ``info/attributes`` keep their places (lowest and highest).
* *Git LFS* run by the host never goes to the network: ``lfs.url`` points at a closed
  loopback port (git config beats a ``.lfsconfig`` the agent may have written), so an
  object missing from the user's ``.git/lfs`` stays a pointer file.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from git_iterare import proc

#: First line of every attributes text: the attributes that convert content are
#: *unspecified* for every path unless a trusted line below sets them.
RESET_LINE = "* !filter !text !eol !ident !working-tree-encoding !crlf\n"

#: Where Git LFS run by the host is told its server is: nothing listens there.
OFFLINE_LFS_URL = "http://127.0.0.1:9/iterare-host-side-lfs-is-offline"

_DIR_UNSAFE = re.compile(r"[\s\"\\\x00-\x1f\x7f]")


def _git(git_dir: Path, *args: str, check: bool = True, text: bool = True
         ) -> subprocess.CompletedProcess[Any]:
    return proc.git("--git-dir", str(git_dir), *args, scrub_git_env=True, check=check,
                    text=text)


def trusted_commit(common_dir: Path, base: str) -> str | None:
    """The commit whose attributes count for a run starting at ``base``.

    ``base`` itself when the user's history (local branches outside ``iterare/``, tags,
    HEAD) reaches it; else the newest commit of that history that ``base`` descends from,
    None when there is none.

    Args:
        common_dir: the user's repository (common dir).
        base: hex commit id.
    """
    out = _git(common_dir, "rev-list", "--boundary", base, "--not", "--exclude=iterare/*",
               "--branches", "--tags", "HEAD", check=False).stdout.split()
    if not any(not line.startswith("-") for line in out):
        return base
    boundary = [line[1:] for line in out if line.startswith("-")]
    return boundary[0] if boundary else None


def _escape_dir(path: str) -> str:
    """``path`` as the start of an attributes pattern (glob characters escaped)."""
    escaped = "".join("\\" + c if c in "*?[]!#" else c for c in path)
    return escaped


def _rebase_line(line: str, folder: str) -> str | None:
    """One line of ``folder/.gitattributes`` rewritten for ``info/attributes``.

    Returns None for lines that cannot be rewritten faithfully (a quoted pattern, a macro
    outside the top folder); dropping one only ever means a conversion does not happen.
    """
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return line.rstrip("\n") + "\n" if stripped else None
    if not folder:
        return stripped + "\n"
    if stripped.startswith(('"', "[attr]")):
        return None
    pattern, *rest = re.split(r"[ \t]+", stripped, maxsplit=1)
    core = pattern[:-1] if pattern.endswith("/") else pattern
    prefix = _escape_dir(folder)
    new = f"{prefix}/{pattern.lstrip('/')}" if "/" in core else f"{prefix}/**/{pattern}"
    return f"{new} {rest[0] if rest else ''}\n"


def attributes_text(git_dir: Path, commit: str | None, user_common_dir: Path) -> str:
    """The ``info/attributes`` text for host-side git over a tree checked out from
    ``commit``'s history (see the module docstring for the order).

    Args:
        git_dir: the repository holding ``commit`` (the user's common dir, or a
            submodule's gitdir under ``.git/modules``).
        commit: the trusted commit (:func:`trusted_commit`), None for no in-tree
            attributes at all.
        user_common_dir: the user's repository, for ``core.attributesFile`` and
            ``info/attributes``.

    Returns:
        The text (always starting with :data:`RESET_LINE`).
    """
    parts = [RESET_LINE]
    global_file = _git(user_common_dir, "config", "--path", "--get", "core.attributesFile",
                       check=False).stdout.strip()
    if not global_file:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        global_file = os.path.join(xdg, "git", "attributes")
    parts.append(_read_text(Path(global_file)))
    if commit is not None:
        listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit).stdout
        found: list[tuple[int, str, str]] = []
        for entry in filter(None, listing.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob" and mode.startswith("100") and (
                    path == ".gitattributes" or path.endswith("/.gitattributes")):
                folder = path[:-len(".gitattributes")].rstrip("/")
                found.append((folder.count("/") + bool(folder), folder, sha))
        for _, folder, sha in sorted(found):
            if _DIR_UNSAFE.search(folder):
                continue  # cannot be written as an unquoted pattern: its lines are dropped
            text = _git(git_dir, "cat-file", "blob", sha).stdout
            parts.extend(filter(None, (_rebase_line(ln, folder) for ln in text.splitlines())))
    parts.append(_read_text(user_common_dir / "info" / "attributes"))
    return "".join(p if p.endswith("\n") or not p else p + "\n" for p in parts)


def may_convert(attributes: str, line_endings: str) -> bool:
    """Whether git may write a file's bytes other than its blob's on checkout.

    It cannot when no attribute is set past :data:`RESET_LINE` (no ``filter``, ``text``,
    ``eol``, ``ident``, ``working-tree-encoding`` for any path) and ``core.autocrlf`` is
    unset or false (``core.eol`` acts only on files marked as text).

    Args:
        attributes: an :func:`attributes_text`.
        line_endings: a :func:`git_iterare.git.safegit.line_ending_config` text.
    """
    if any(line.strip() and not line.lstrip().startswith("#")
           for line in attributes.removeprefix(RESET_LINE).splitlines()):
        return True
    return "autocrlf" in line_endings and "autocrlf = false" not in line_endings


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace") if path.is_file() else ""
    except OSError:
        return ""


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\t", "\\t") + '"'


def filter_config(common_dir: Path) -> str:
    """Config text with the user's filter drivers and host-side Git LFS settings.

    ``filter.<driver>.clean|smudge|process|required`` as the user's git reads them in
    their repository, ``lfs.storage`` pointing at the user's LFS objects (their own
    setting, else ``<common dir>/lfs``), and the network of Git LFS closed
    (:data:`OFFLINE_LFS_URL`).
    """
    out = _git(common_dir, "config", "-z", "--get-regexp", r"^filter\.", check=False).stdout
    drivers: dict[str, list[tuple[str, str]]] = {}
    for item in filter(None, out.split("\0")):
        key, _, value = item.partition("\n")
        section, _, rest = key.partition(".")
        name, _, var = rest.rpartition(".")
        if section != "filter" or not name or var not in ("clean", "smudge", "process",
                                                          "required"):
            continue
        drivers.setdefault(name, []).append((var, value))
    text = []
    for name, items in drivers.items():
        text.append(f"[filter {_quote(name)}]\n")
        text.extend(f"\t{var} = {_quote(value)}\n" for var, value in items)
    storage = _git(common_dir, "config", "--path", "--get", "lfs.storage",
                   check=False).stdout.strip()
    if storage and not os.path.isabs(storage):
        storage = str(common_dir / storage)
    text.append(f"[lfs]\n\tstorage = {_quote(storage or str(common_dir / 'lfs'))}\n"
                f"\turl = {_quote(OFFLINE_LFS_URL)}\n\tskipdownloaderrors = true\n"
                "[lfs \"transfer\"]\n\tmaxretries = 0\n")
    return "".join(text)
