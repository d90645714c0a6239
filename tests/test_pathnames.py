"""The names git refuses (git_iterare.git.pathnames), checked against git itself: every name
of git's own tests of these rules (t0060-path-utils, t1450-fsck, t7415-submodule-names)
and some thousands made up of their pieces go into an index with ``core.protectNTFS`` and
``core.protectHFS`` on, as files, directories and symlinks; what git leaves out must be
exactly what :func:`refused_name` refuses. Then the search through a run's commits."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from git_iterare.git import pathnames

ZWNJ = "\u200c"

#: Names git's tests say are (or, after ``--not``, are not) .git or .gitmodules.
GIT_VECTORS = [
    ".git", ".GIT", ".Git", ".gIt", f".g{ZWNJ}it", f".git{ZWNJ}", f"{ZWNJ}.git", ".gi\u200dt",
    ".git\ufeff", ".g\u206ait", "git~1", "GIT~1", "Git~1", ".git.", ".git..", ".git ",
    ".git . .", ".git. . .", ".git::$INDEX_ALLOCATION", ".git:$DATA", "git~1:stream",
    ".git\\foo", "a\\.git", "a\\.GIT\\b", "..\\.git", "git~2", ".git x", ".gitx", "git~10",
    ".GIT.\\x", " .git", "..git", "git~1 .", ".g\u0130t", ".\u0261it",
    ".gitmodules", f".git{ZWNJ}modules", ".Gitmodules", ".gitmoduleS", ".gitmodules ",
    ".gitmodules.", ".gitmodules  ", ".gitmodules. ", ".gitmodules .", ".gitmodules..",
    ".Gitmodules . ", "GITMOD~1", "gitmod~1", "GITMOD~2", "gitmod~3", "GITMOD~4",
    "GITMOD~1 ", "gitmod~2.", "gitmod~4 . ", "GI7EBA~1", "gi7eba~9", "GI7EB~10", "GI7EB~99",
    "GI7E~100", "GI7E~999", "~1000000", "~9999999", ".gitmodules:$DATA",
    "gitmod~4 . :$DATA", ".gitmodules x", ".gitmodules .x", " .gitmodules", "..gitmodules",
    "gitmodules", ".gitmodule", ".gitmodules x ", "GI7EBA~", "GI7EBA~0", "GI7EBA~~1",
    "GI7EBA~X", "Gx7EBA~1", "GI7EBX~1", "GI7EB~1", "GI7EB~01", "GI7EB~1X",
    ".gitmodules,:$DATA", "gitmod~5", "a\\.gitmodules", "a\\gitmod~1", ".gitmodules\\x",
    "x", "..", ".", "...", ". ", ".gitignore", ".gitattributes",
]

#: What made-up names start with (each letter's case flipped at random, code points HFS+
#: ignores put in), and what follows.
STEMS = [".git", "git~1", ".gitmodules", "gitmod~1", "gi7eba~1", "gi7e~12", "~1000000", ".",
         "..", "x", "a\\", "\\"]
PIECES = [".", " ", ":", "\\", "~", "1", "0", "x", "$DATA", ".git", "git~1", "modules", "."]


def made_up(count: int, seed: int = 25) -> list[bytes]:
    rng = random.Random(seed)
    names: set[bytes] = set()
    while len(names) < count:
        text = "".join(c.upper() if rng.random() < 0.3 else c for c in rng.choice(STEMS))
        text += "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.2:
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(["\u200c", "\ufeff", "\u202e", "\u00e9"]) + text[at:]
        name = text.encode()
        if rng.random() < 0.05:
            name += b"\xff"  # not UTF-8 after a possible alias
        names.add(name)
    return sorted(names)


NAMES = sorted({n.encode() for n in GIT_VECTORS} | set(made_up(4000)))


def accepted(tmp_path: Path, entries: list[tuple[str, bytes]]) -> set[bytes]:
    """The paths of ``entries`` ((mode, path)) git takes into an index."""
    repo = tmp_path / "probe"
    if not repo.exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    (repo / ".git" / "index").unlink(missing_ok=True)
    subprocess.run(["git", "-c", "core.protectNTFS=true", "-c", "core.protectHFS=true",
                    "update-index", "-z", "--index-info"], cwd=repo, check=True,
                   capture_output=True, input=b"".join(
                       f"{mode} {blob}\t".encode() + path + b"\0" for mode, path in entries))
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=repo, check=True,
                            capture_output=True).stdout
    return set(filter(None, listed.split(b"\0")))


@pytest.mark.parametrize("kind", ["file", "directory", "symlink", "symlink below"])
def test_refused_names_are_the_ones_git_refuses(tmp_path: Path, kind: str) -> None:
    def path(name: bytes) -> bytes:
        return {"file": b"d/" + name, "directory": b"d/" + name + b"/f",
                "symlink": b"d/" + name, "symlink below": b"d/" + name + b"/link"}[kind]

    def ours(name: bytes) -> bool:
        if kind == "symlink below":
            return bool(pathnames.refused_name(name)) or pathnames.gitmodules_dir(name)
        return bool(pathnames.refused_name(name, symlink=kind == "symlink"))

    mode = "120000" if kind.startswith("symlink") else "100644"
    taken = accepted(tmp_path, [(mode, path(n)) for n in NAMES])
    by_git = {n for n in NAMES if path(n) not in taken}
    by_us = {n for n in NAMES if ours(n)}
    assert by_us - by_git == set(), "refused by us only"
    assert by_git - by_us == set(), "refused by git only"
    assert len(by_git) > 200 and len(NAMES) - len(by_git) > 1000  # both kinds are probed


def test_refused_name_says_why() -> None:
    assert pathnames.refused_name(b"..") == pathnames.DOT
    assert pathnames.refused_name(b".GIT") == pathnames.DOTGIT
    assert pathnames.refused_name(b"GIT~1") == pathnames.NTFS_DOTGIT
    assert pathnames.refused_name(b".git. ") == pathnames.NTFS_DOTGIT
    assert pathnames.refused_name(".g\u200cit".encode()) == pathnames.HFS_DOTGIT
    assert pathnames.refused_name(b".gitmodules") is None
    assert pathnames.refused_name(b".gitmodules", symlink=True) == pathnames.GITMODULES_LINK
    assert pathnames.refused_name(b"x", symlink=True, below_gitmodules=True) == \
        pathnames.GITMODULES_LINK
    assert pathnames.refused_name(b"") == pathnames.EMPTY
    assert pathnames.refused_name(b"a/b") == pathnames.SLASH
    assert pathnames.shown(b"a\x1b[31m\xff") == "'a\\x1b[31m\\\\xff'"
