"""Running this checkout's commands as an unprivileged user the test creates (``useradd``):
git's ownership checks, file permissions and the uid mapping behave differently than for
root, so attacks are tried as such a user too."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.conftest import BIN_DIR


@contextlib.contextmanager
def new_user(prefix: str = "itr", groups: Sequence[str] = ()) -> Iterator[pwd.struct_passwd]:
    """A user of this machine (not root) with a home of their own, in ``groups``; removed
    with their processes and home afterwards."""
    assert os.geteuid() == 0, "the test creates a user: run the suite as root (CI does)"
    name = f"{prefix}{os.getpid() % 100000}"
    extra = ["--groups", ",".join(groups)] if groups else []
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", *extra, name],
                   check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-u", name], capture_output=True, check=False)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def cwd_bin(cwd: Path) -> Path:
    """The ``bin`` folder of the test's top directory above ``cwd``."""
    for folder in (cwd, *cwd.parents):
        if (folder / "bin" / "git-iterare").exists():
            return folder / "bin"
    raise AssertionError(f"no bin folder above {cwd}")


def user_bin(top: Path) -> Path:
    """This checkout's commands for another user: the test's Python may live where only
    root can go (pyenv under /root), so they run on the system's Python 3 with this
    environment's packages."""
    import site
    import sys

    packages = next(p for p in site.getsitepackages() if p.startswith(sys.prefix))
    folder = top / "bin"
    folder.mkdir()
    for exe in BIN_DIR.glob("git-iterare*"):
        body = exe.read_text().split("\n", 1)[1]
        (folder / exe.name).write_text(
            f"#!/usr/bin/python3\nimport site\nsite.addsitedir({packages!r})\n{body}")
        (folder / exe.name).chmod(0o755)
    return folder


def as_user(user: pwd.struct_passwd, *args: str, cwd: Path, timeout: float = 120
            ) -> subprocess.CompletedProcess:
    """Run ``args`` as ``user`` (their groups, home and a clean environment), with this
    checkout's commands (see :func:`user_bin`) first on the PATH."""
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name,
           "PATH": f"{cwd_bin(cwd)}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "GIT_AUTHOR_NAME": "U", "GIT_AUTHOR_EMAIL": "u@example.com",
           "GIT_COMMITTER_NAME": "U", "GIT_COMMITTER_EMAIL": "u@example.com"}
    runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
    return subprocess.run([runuser, "-u", user.pw_name, "--", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def user_folder(user: pwd.struct_passwd, name: str) -> Iterator[Path]:
    """A folder ``/tmp/itr-NAME-<pid>`` of ``user``'s holding this checkout's commands
    (:func:`user_bin`); removed afterwards with everything in it."""
    top = Path(f"/tmp/itr-{name}-{os.getpid()}")
    top.mkdir(mode=0o755)
    try:
        os.chown(top, user.pw_uid, user.pw_gid)
        user_bin(top)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def user_repository(user: pwd.struct_passwd, top: Path, *then: str) -> Path:
    """``TOP/repo``: a repository of ``user``'s on ``main`` with one empty commit, made by
    them; then ``git THEN`` is run there as them (``iterare init``, say)."""
    repo = top / "repo"
    for args in (["git", "init", "-q", "-b", "main", str(repo)],
                 ["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "i"],
                 *([["git", "-C", str(repo), *then]] if then else [])):
        done = as_user(user, *args, cwd=top)
        assert done.returncode == 0, done.stderr
    return repo
