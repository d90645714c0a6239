"""A hostile repository's own files (issue 25, items 1 and 5): its prompts,
``.iterare/config.toml``, ``.iterare/include`` and ``.iterare/Dockerfile`` are read under a
memory and a time bound, never through a symlink, and what is wrong with them is one line.

Every command runs under an address-space limit (:data:`LIMIT_BYTES`, ``prlimit --as``) and
a timeout, so a regression fails here in seconds instead of eating the machine; as root
and as an unprivileged user the test creates.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from git_iterare import limits as lim
from tests.unprivileged import as_user, new_user, user_folder, user_repository

#: Address space a command may use: far more than any of them needs (about 100 MB).
LIMIT_BYTES = 1024 * 1024 * 1024
#: Seconds a command may take (each takes well under two).
SECONDS = 60


def alias_bomb() -> str:
    """A prompt of about 350 bytes whose frontmatter's aliases stand for 9**9 values."""
    lines = ["agent: shell", "a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    lines.append("env: *i")
    return "---\n" + "\n".join(lines) + "\n---\necho hi\n"


@dataclass
class Side:
    """Who runs the commands (root, or a user of this machine) and their repository."""

    repo: Path
    home: Path
    user: pwd.struct_passwd | None

    def write(self, path: Path, data: str | bytes) -> Path:
        """Write ``path`` (folders made) as this side's file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        self.own(path)
        return path

    def link(self, path: Path, target: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        self.own(path)

    def own(self, path: Path) -> None:
        """Give ``path`` and its folders below the user's top folders to the user."""
        if self.user is None:
            return
        tops = (self.repo.parent, self.home)
        for each in (path, *path.parents):
            if not any(each != top and each.is_relative_to(top) for top in tops):
                break
            os.lchown(each, self.user.pw_uid, self.user.pw_gid)

    def iterare(self, *args: str) -> subprocess.CompletedProcess:
        """``git iterare ARGS`` in the repository, bounded (:data:`LIMIT_BYTES`,
        :data:`SECONDS`)."""
        command = ["prlimit", f"--as={LIMIT_BYTES}", "--", "git", "iterare", *args]
        if self.user is not None:
            return as_user(self.user, *command, cwd=self.repo, timeout=SECONDS)
        return subprocess.run(command, cwd=self.repo, capture_output=True, text=True,
                              timeout=SECONDS, check=False)


@pytest.fixture(scope="module")
def unprivileged() -> Iterator[pwd.struct_passwd]:
    with new_user(prefix="itb") as user:
        yield user


@pytest.fixture(params=["root", "user"])
def side(request: pytest.FixtureRequest, repo: Path, hermetic_env: Path) -> Iterator[Side]:
    if request.param == "root":
        yield Side(repo, hermetic_env, None)
        return
    user: pwd.struct_passwd = request.getfixturevalue("unprivileged")
    with user_folder(user, "bounds") as top:
        yield Side(user_repository(user, top), Path(user.pw_dir), user)


def one_error(done: subprocess.CompletedProcess, line: str) -> None:
    """``done`` failed with exit status 2 and printed nothing but ``error: LINE``."""
    assert (done.returncode, done.stderr) == (2, f"error: {line}\n"), done.stderr[-2000:]


# -- prompts ----------------------------------------------------------------------------------

def test_a_prompt_of_nested_aliases_is_one_error(side: Side) -> None:
    path = side.write(side.repo / ".iterare" / "prompts" / "bomb.md", alias_bomb())
    started = side.iterare("execute", "bomb")
    one_error(started, f"{path}:3: bad YAML in frontmatter: anchors and aliases "
                       "(&name, *name) are not allowed")
    # trust reads every prompt's frontmatter for the variables it passes in.
    shown = side.iterare("trust", "--show")
    assert (shown.returncode, shown.stdout) == (0, f"repository: {side.repo}\n"
                                                   "asks for nothing beyond the defaults\n")


LARGE = "env: [" + ", ".join(["A"] * 200_000) + "]"


@pytest.mark.parametrize("frontmatter, problem", [
    ("env: " + "[" * 30000 + "]" * 30000, "2: bad YAML in frontmatter: nested deeper than "
                                          f"{lim.MAX_YAML_DEPTH} levels"),
    ("env: [" + ", ".join(["A"] * 5000) + "]",
     f"2: bad YAML in frontmatter: more than {lim.MAX_YAML_NODES} values"),
    (LARGE, f"2: the frontmatter is {len(LARGE) + 1} bytes, more than 64 KiB "
            "(MAX_FRONTMATTER_BYTES) (keep the frontmatter to its keys; the task goes below "
            "it)"),
], ids=["deep", "many", "large"])
def test_frontmatter_over_its_bounds_is_one_error(side: Side, frontmatter: str,
                                                  problem: str) -> None:
    path = side.write(side.repo / ".iterare" / "prompts" / "big.md",
                      f"---\n{frontmatter}\n---\necho hi\n")
    one_error(side.iterare("execute", "big"), f"{path}:{problem}")


# -- .iterare/config.toml ---------------------------------------------------------------------

def test_config_nested_too_deep_is_one_error(side: Side) -> None:
    path = side.write(side.repo / ".iterare" / "config.toml",
                      "[run]\ntimeout = " + "[" * 5000 + "]" * 5000 + "\n")
    one_error(side.iterare("trust", "--show"),
              f"{path}: arrays or inline tables nested too deep to read")


def test_config_of_90000_unknown_keys_warns_about_20(side: Side) -> None:
    path = side.write(side.repo / ".iterare" / "config.toml",
                      "[docker]\n" + "".join(f"k{i} = 1\n" for i in range(90_000)))
    listed = side.iterare("config", "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    warnings = listed.stderr.splitlines()
    assert len(warnings) == 21
    assert warnings[-1] == f"warning: {path}: and 89980 more unknown keys"


def test_config_over_its_size_is_one_error(side: Side) -> None:
    path = side.write(side.repo / ".iterare" / "config.toml",
                      "# x\n" * (lim.MAX_PROJECT_FILE_BYTES // 4 + 1))
    one_error(side.iterare("config", "--list"),
              f"{path} is larger than 1024 KiB (MAX_PROJECT_FILE_BYTES) (keep it small)")


# -- .iterare/include and the Dockerfile ---------------------------------------------------

def test_include_over_its_lines_is_one_error(side: Side) -> None:
    side.write(side.repo / ".iterare" / "include",
               "".join(f"f{i}.env\n" for i in range(lim.MAX_INCLUDE_PATTERNS + 1)))
    one_error(side.iterare("trust", "--show"),
              f".iterare/include has {lim.MAX_INCLUDE_PATTERNS + 1} lines, more than "
              f"{lim.MAX_INCLUDE_PATTERNS} (MAX_INCLUDE_PATTERNS) (name the files with fewer "
              "globs)")


def test_include_globs_are_matched_in_one_bounded_walk(repo: Path) -> None:
    """Lines of many ``**`` over 900 folders: Path.glob took minutes; one walk is quick."""
    for i in range(30):
        for j in range(30):
            (repo / f"d{i}" / f"e{j}").mkdir(parents=True)
            (repo / f"d{i}" / f"e{j}" / "f").write_text("x\n")
    (repo / "d1" / "e1" / "f3.env").write_text("x\n")
    (repo / ".iterare").mkdir()
    lines = ["/".join(["**"] * 8) + f"/f{i}.env" for i in range(lim.MAX_INCLUDE_PATTERNS)]
    (repo / ".iterare" / "include").write_text("\n".join(lines) + "\n")
    probe = ("from git_iterare.git.repo import discover\n"
             "from git_iterare.runner.workspace import include_paths\n"
             "print(include_paths(discover('.')))\n")
    done = subprocess.run(["prlimit", f"--as={LIMIT_BYTES}", "--", sys.executable, "-c", probe],
                          cwd=repo, capture_output=True, text=True, timeout=SECONDS,
                          check=False)
    assert (done.returncode, done.stdout) == (0, "('d1/e1/f3.env',)\n"), done.stderr


def test_dockerfile_over_its_size_is_one_error(side: Side) -> None:
    path = side.write(side.repo / ".iterare" / "Dockerfile",
                      "FROM x\n" + "# x\n" * (lim.MAX_PROJECT_FILE_BYTES // 4))
    one_error(side.iterare("trust", "--show"),
              f"{path} is larger than 1024 KiB (MAX_PROJECT_FILE_BYTES) (keep it small)")


def test_trust_show_of_a_long_dockerfile_changed_everywhere(side: Side) -> None:
    """Its diff from the approved one took more than ten minutes (difflib on 100,000 lines)."""
    dockerfile = side.repo / ".iterare" / "Dockerfile"
    side.write(dockerfile, "FROM x\n" + "".join(f"# {i}\n" for i in range(100_000)))
    assert side.iterare("trust", "--yes").returncode == 0
    side.write(dockerfile, "FROM x\n" + "".join(f"# {i}\n" if i % 2 else f"# x{i}\n"
                                                 for i in range(100_000)))
    shown = side.iterare("trust", "--show")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "  @@ -1,100002 +1,100002 @@\n" in shown.stdout


# -- symlinks (item 5) ------------------------------------------------------------------------

#: A file of the user's that is valid as a config file, a Dockerfile and an include file.
KEY = '# SECRET-KEY-1a2b3c\n[firewall]\nallowed_domains = ["secret-key-1a2b3c.example"]\n'

LINKED: dict[str, Callable[[Side, Path], Path]] = {
    "config.toml": lambda s, key: _linked(s, ".iterare/config.toml", key),
    "Dockerfile": lambda s, key: _linked(s, ".iterare/Dockerfile", key),
    "include": lambda s, key: _linked(s, ".iterare/include", key),
    ".iterare": lambda s, key: _linked(s, ".iterare", key.parent),
}


def _linked(side: Side, name: str, target: Path) -> Path:
    side.link(side.repo / name, target)
    return side.repo / name


@pytest.mark.parametrize("name", list(LINKED))
def test_a_symlink_in_iterare_is_refused_not_followed(side: Side, name: str) -> None:
    folder = side.home / "private"
    for each in ("config.toml", "Dockerfile", "include"):
        key = side.write(folder / each, KEY)
    link = LINKED[name](side, key)
    side.write(side.repo / "task.md", "---\nagent: shell\n---\necho hi\n")
    if name == ".iterare":
        line = (f"{link} is a symlink; git iterare reads .iterare/ only as a folder of the "
                "repository")
    else:
        line = (f"{link} is a symlink; git iterare reads the files of .iterare/ only as "
                "regular files")
    line += " (replace it with the file it points to, if you trust that file)"
    for args in (["trust", "--show"], ["execute", "task.md"]):
        done = side.iterare(*args)
        one_error(done, line)
        assert "secret-key" not in (done.stdout + done.stderr).lower()


def test_init_never_writes_through_a_symlink(side: Side) -> None:
    victim = side.write(side.home / "victim.txt", "mine\n")
    side.link(side.repo / ".iterare" / "Dockerfile", victim)
    kept = side.iterare("init")
    assert kept.returncode == 0, kept.stderr
    assert f"       kept  {side.repo}/.iterare/Dockerfile\n" in kept.stdout
    assert victim.read_text() == "mine\n"
    missing = side.home / "created-by-init"
    config = side.repo / ".iterare" / "config.toml"
    config.unlink()
    side.link(config, missing)
    one_error(side.iterare("init"), f"{config} is a symlink; git iterare reads the files of "
              ".iterare/ only as regular files (replace it with the file it points to, if "
              "you trust that file)")
    forced = side.iterare("init", "--force")
    assert forced.returncode == 0, forced.stderr
    assert victim.read_text() == "mine\n" and not os.path.lexists(missing)
    for written in (config, side.repo / ".iterare" / "Dockerfile"):
        assert not written.is_symlink() and written.is_file()
