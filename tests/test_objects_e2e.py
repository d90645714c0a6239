"""Issue 25, item 4, through the real sandbox with the shell agent: a run's agent sees the
objects of its base's history and nothing else of the user's object store (five planted
secrets: a live stash, a dropped stash, a dangling blob, a commit only the reflog holds, a
private branch and a tag outside the base's history), reading through git or the mounted
files themselves; the next run adds only what is new to the repository's object cache.
As root and as an unprivileged user, whose cache stays theirs."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from tests.conftest import iterare
from tests.runs_helpers import run_id
from tests.test_runs_e2e import project  # noqa: F401  (fixture)
from tests.test_trust_boundary_e2e import as_user, user, user_repo  # noqa: F401  (fixtures)

pytestmark = pytest.mark.docker

SECRETS = ("SECRET-LIVE-STASH", "SECRET-DROPPED-STASH", "SECRET-DANGLING-BLOB",
           "SECRET-REFLOG-ONLY", "SECRET-PRIVATE-BRANCH", "SECRET-TAGGED-FILE",
           "SECRET-TAG-MESSAGE")

#: Plants the secrets (the first four packed with `git repack -a`, the rest loose) and
#: prints the ids of what holds them, one a line.
PLANT = r"""set -eu
tree_with() {  # a tree holding one file with $1
    printf '100644 blob %s\t%s.txt\n' "$(printf '%s\n' "$1" | git hash-object -w --stdin)" \
        "$1" | git mktree
}
private=$(git commit-tree -p HEAD -m private "$(tree_with SECRET-PRIVATE-BRANCH)")
git branch private "$private"
tagged=$(git commit-tree -m tagged "$(tree_with SECRET-TAGGED-FILE)")
git tag -a v-secret -m SECRET-TAG-MESSAGE "$tagged"
echo SECRET-REFLOG-ONLY > reflog.txt && git add reflog.txt && git commit -qm reflog
reflog=$(git rev-parse HEAD)
git reset -q --hard HEAD~1
echo SECRET-LIVE-STASH >> README.md && git stash -q
git repack -adq
echo SECRET-DROPPED-STASH >> README.md && git stash -q
dropped=$(git rev-parse stash@{0})
git stash drop -q
blob=$(echo SECRET-DANGLING-BLOB | git hash-object -w --stdin)
echo "$private $tagged $(git rev-parse v-secret) $reflog $(git rev-parse stash@{0})"
echo "$dropped $blob"
"""

#: The agent: every object git finds, the files of the mounted store read without it
#: (packs copied into a fresh repository, loose objects inflated), the history.
PROBE = r"""git cat-file --batch-all-objects --batch > all-objects.out
git cat-file --batch-all-objects --batch-check='%(objectname)' > all-ids.out
git rev-list --objects HEAD | cut -d' ' -f1 > reachable.out
find /git -path /git/run -prune -o -print | sort > store-files.out
git init -q /tmp/probe
cp /git/objects/pack/* /tmp/probe/.git/objects/pack/ 2>/dev/null || true
git -C /tmp/probe cat-file --batch-all-objects --batch > direct.out
git -C /tmp/probe cat-file --batch-all-objects --batch-check='%(objectname)' > direct-ids.out
find /git/objects -type f -path '*/[0-9a-f][0-9a-f]/*' -exec python3 -c \
    'import sys, zlib; [sys.stdout.buffer.write(zlib.decompress(open(f, "rb").read()))
     for f in sys.argv[1:]]' {} + > loose.out
if touch /git/objects/planted 2>/dev/null; then echo writable; else echo read-only; fi \
    > store-writable.out
echo probed
"""

Run = Callable[..., subprocess.CompletedProcess]


def out(run: Run, *args: str) -> str:
    """The output of ``args`` run as the repository's owner; fails the test when it fails."""
    done = run(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


def reachable(run: Run, *revs: str) -> set[str]:
    """Ids of the objects ``git rev-list --objects revs`` lists."""
    return {line.split()[0] for line in out(run, "git", "rev-list", "--objects", *revs
                                            ).splitlines()}


def cached(run: Run, rid: str) -> dict[str, int]:
    """What the run's record says the object cache did for it."""
    data: dict[str, int] = json.loads(out(run, "git", "show", f"refs/iterare/runs/{rid}:run.json")
                                      )["extra"]["cached"]
    return data


def pack_ids(indexes: Iterable[Path]) -> set[str]:
    """Ids of the objects the pack ``indexes`` list."""
    ids: set[str] = set()
    for index in indexes:
        with index.open("rb") as handle:
            listed = subprocess.run(["git", "show-index"], stdin=handle, capture_output=True,
                                    text=True, check=True).stdout
        ids |= {line.split()[1] for line in listed.splitlines()}
    return ids


def probe_sees_only(repo: Path, run: Run, rid: str, base: str, planted: set[str]) -> None:
    """The agent of run ``rid`` saw every object of ``base``'s history and nothing else:
    no planted object, no secret (through git, or the mounted files read directly)."""
    worktree = repo / ".iterare" / "worktrees" / rid
    history = reachable(run, base)
    for name in ("all-objects", "direct", "loose"):
        seen = (worktree / f"{name}.out").read_bytes()
        assert [s for s in SECRETS if s.encode() in seen] == [], name
    ids = set((worktree / "all-ids.out").read_text().split())
    assert ids & planted == set()
    assert ids == history  # complete, and nothing more
    assert set((worktree / "reachable.out").read_text().split()) == history
    assert set((worktree / "direct-ids.out").read_text().split()) == history  # the files
    files = (worktree / "store-files.out").read_text().split()
    assert files[:3] == ["/git", "/git/objects", "/git/objects/pack"]
    assert [f for f in files[3:] if not re.fullmatch(
        r"/git/objects/pack/pack-[0-9a-f]{40}\.(idx|pack)", f)] == []
    assert (worktree / "store-writable.out").read_text() == "read-only\n"
    # The view the sandbox mounted is packs of exactly that history.
    view = repo / ".git" / "iterare" / "gitdirs" / f"{rid}.objects" / "pack"
    assert pack_ids(view.glob("*.idx")) == history


def cache_is_the_users(repo: Path, uid: int) -> None:
    """Every file of the object cache is the user's; the packs read-only, the folder
    theirs alone."""
    cache = repo / ".git" / "iterare" / "object-cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    for path in [cache, *cache.rglob("*")]:
        assert path.lstat().st_uid == uid, path
    for path in (cache / "packs").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o444, path


def two_runs_see_only_their_base(repo: Path, run: Run, uid: int) -> None:
    """Plant the secrets, run the probe, commit once more, run it again: each run sees
    exactly its base's history, and the second one packs only the new objects."""
    prompts = repo / ".iterare" / "prompts"
    out(run, "sh", "-c", f"mkdir -p {prompts} && printf '%s' \"$0\" > {prompts}/probe.md",
        f"---\nagent: shell\n---\n{PROBE}")
    planted = set(out(run, "sh", "-c", PLANT).split())
    assert len(planted) == 7
    # The secrets are there for git to find, as the agent would have found them.
    found = out(run, "sh", "-c", "git cat-file --batch-all-objects --batch | "
                "grep -ao 'SECRET-[A-Z-]*' | sort -u").split()
    assert found == sorted(SECRETS)
    first_base = out(run, "git", "rev-parse", "HEAD").strip()

    first = run("git", "iterare", "execute", "probe", "--follow")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "probed" in first.stdout
    rid = run_id(first.stdout)
    probe_sees_only(repo, run, rid, first_base, planted)
    assert cached(run, rid) == {"objects": len(reachable(run, first_base)), "packs": 1,
                                "pack_bytes": cached(run, rid)["pack_bytes"]}
    packs = repo / ".git" / "iterare" / "object-cache" / "packs"
    before = set(packs.iterdir())

    out(run, "sh", "-c", "echo two > two.txt && git add two.txt && git commit -qm two")
    second_base = out(run, "git", "rev-parse", "HEAD").strip()
    second = run("git", "iterare", "execute", "probe", "--follow")
    assert second.returncode == 0, second.stdout + second.stderr
    rid2 = run_id(second.stdout)
    probe_sees_only(repo, run, rid2, second_base, planted)
    new = reachable(run, second_base, f"^{first_base}")
    assert len(new) == 3  # the commit, its tree, two.txt
    added = set(packs.iterdir()) - before
    assert sorted(p.suffix for p in added) == [".idx", ".pack"]
    assert pack_ids(p for p in added if p.suffix == ".idx") == new  # only what is new
    made = cached(run, rid2)
    assert (made["objects"], made["packs"]) == (3, 2)
    assert made["pack_bytes"] == sum(p.stat().st_size for p in added)
    cache_is_the_users(repo, uid)

    # A third run from the same base packs nothing.
    third = run("git", "iterare", "execute", "probe", "--follow")
    assert third.returncode == 0, third.stdout + third.stderr
    assert cached(run, run_id(third.stdout)) == {"objects": 0, "pack_bytes": 0, "packs": 2}
    assert set(packs.iterdir()) - before == added

    # A run from the third one's result (--reuse) packs what that run committed.
    rid3 = run_id(third.stdout)
    reused = out(run, "git", "rev-parse", f"iterare/{rid3}").strip()
    fourth = run("git", "iterare", "execute", "--reuse", rid3, "probe", "--follow")
    assert fourth.returncode == 0, fourth.stdout + fourth.stderr
    rid4 = run_id(fourth.stdout)
    probe_sees_only(repo, run, rid4, reused, planted)
    assert cached(run, rid4)["objects"] == len(reachable(run, reused, f"^{second_base}"))

    # cleanup --cache removes it (and says so); the runs' views keep their packs.
    dropped = out(run, "git", "iterare", "cleanup", "--cache")
    assert dropped.splitlines()[0] == ("removed the object cache of this repository for "
                                       "runs on this machine")
    assert not packs.parent.exists()
    view = repo / ".git" / "iterare" / "gitdirs" / f"{rid2}.objects" / "pack"
    assert pack_ids(view.glob("*.idx")) == reachable(run, second_base)
    again = out(run, "git", "iterare", "cleanup", "--cache")
    assert again.startswith("no object cache of this repository here or on "), again


def test_a_run_sees_only_its_bases_history(project: Path) -> None:  # noqa: F811
    def run(*args: str) -> subprocess.CompletedProcess:
        if args[:2] == ("git", "iterare"):
            return iterare(*args[2:], cwd=project)
        return subprocess.run(args, cwd=project, capture_output=True, text=True, check=False)

    two_runs_see_only_their_base(project, run, os.getuid())


def test_an_unprivileged_users_run_sees_only_its_bases_history(
        user: pwd.struct_passwd, user_repo: Path) -> None:  # noqa: F811
    def run(*args: str) -> subprocess.CompletedProcess:
        return as_user(user, *args, cwd=user_repo, timeout=300)

    # The repository has a README.md, as the planting expects.
    out(run, "sh", "-c", "echo hello > README.md && git add README.md && git commit -qm r")
    two_runs_see_only_their_base(user_repo, run, user.pw_uid)



#: Agents that name objects they were not given but know the ids of (PRIVATE, BLOB): a
#: commit with the user's private commit as second parent; a tree holding a private blob.
#: Neither could read them, but the user's repository has them.
BORROWERS = {
    "merge": r"""set -eu
printf 'tree %s\nparent %s\nparent PRIVATE\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000
\nmerge\n' "$(git rev-parse HEAD^{tree})" "$(git rev-parse HEAD)" \
    | git hash-object -t commit -w --literally --stdin | xargs git update-ref HEAD
echo innocent > innocent.txt
""",
    "blob": r"""set -eu
tree=$(printf '100644 blob BLOB\tborrowed.txt\n' | git mktree --missing)
git commit-tree -p HEAD -m borrowed "$tree" | xargs git update-ref HEAD
echo innocent > innocent.txt
""",
}


def test_a_run_cannot_borrow_objects_it_was_not_given(project: Path) -> None:  # noqa: F811
    """Its branch would hold the user's private commit or blob (merged, then pushed, and
    in the next run's view): not imported; its files are committed instead."""
    def sh(script: str) -> str:
        done = subprocess.run(["sh", "-c", script], cwd=project, capture_output=True,
                              text=True, check=True)
        return done.stdout.strip()

    private = sh("git checkout -qb private && echo SECRET-PRIVATE-BRANCH > s.txt && "
                 "git add s.txt && git commit -qm private && git rev-parse HEAD && "
                 "git checkout -q -")
    blob = sh("echo SECRET-DANGLING-BLOB | git hash-object -w --stdin")
    for name, script in BORROWERS.items():
        (project / ".iterare" / "prompts" / f"{name}.md").write_text(
            "---\nagent: shell\n---\n"
            + script.replace("PRIVATE", private).replace("BLOB", blob))
        rid = run_id(iterare("execute", name, "--follow", cwd=project).stdout)
        head = sh(f"git rev-parse iterare/{rid}")
        history = set(sh(f"git rev-list --objects {head}").split())
        assert private not in history and blob not in history, name
        assert sh(f"git show {head}:innocent.txt") == "innocent", name
        shown = iterare("show", rid, cwd=project).stdout
        assert "is neither in the run gitdir nor in what the run was given" in shown, name
