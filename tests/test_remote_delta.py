"""A remote run's worktree comes back as its change (git_iterare.runner.placement.delta):
the host applies the engine's list without following a symlink the agent made, and a run
on the DinD engine brings back about its change, not its tree, committed as the engine
left it (a new file, a changed one, a deletion, an executable bit, a symlink, a file in
place of a folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_iterare.runner.placement.delta import Change, apply
from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_remote_runs import over_tls, remote_image  # noqa: F401  (fixtures)


def staged_change(tmp_path: Path, files: dict[str, str], links: dict[str, str],
                  deleted: list[str]) -> Change:
    staged = tmp_path / "staged"
    staged.mkdir()
    for rel, text in files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text)
    for rel, target in links.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, staged / rel)
    return Change(staged=staged, changed=len(files) + len(links), deleted=deleted)


def test_apply_never_goes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("the user's\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "old").write_text("old\n")
    (tree / "gone").write_text("gone\n")
    (tree / ".git").write_text("gitdir: somewhere\n")
    os.symlink(outside, tree / "link")  # as the base has it
    change = staged_change(
        tmp_path, files={"link/new": "through the link?\n", "sub/new": "new\n"},
        links={"sub/old": "/etc/passwd"},
        deleted=["gone", "link/keep", "../outside/keep", ".git", "sub/../gone"])
    apply(tree, change)
    assert (outside / "keep").read_text() == "the user's\n"  # deleted through no link
    assert sorted(os.listdir(outside)) == ["keep"]
    assert (tree / "link").is_dir() and not (tree / "link").is_symlink()
    assert (tree / "link" / "new").read_text() == "through the link?\n"
    assert os.readlink(tree / "sub" / "old") == "/etc/passwd"
    assert (tree / "sub" / "new").read_text() == "new\n"
    assert not (tree / "gone").exists()
    assert (tree / ".git").read_text() == "gitdir: somewhere\n"
    assert os.listdir(change.staged) == []


def test_a_folder_in_place_of_a_file_and_back(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "dir").mkdir(parents=True)
    (tree / "dir" / "a").write_text("a\n")
    (tree / "file").write_text("file\n")
    change = staged_change(tmp_path, files={"file/inside": "now a folder\n", "dir": "a file\n"},
                           links={}, deleted=["dir/a", "file"])
    apply(tree, change)
    assert (tree / "file" / "inside").read_text() == "now a folder\n"
    assert (tree / "dir").read_text() == "a file\n"


#: Changes a few of many files, in every way a worktree can change.
CHANGE_TASK = """\
echo changed > d3/f003
rm d5/f005
chmod +x d7/f007
ln -s ../d1/f001 d9/link
echo new > brand-new.txt
rm -r d2 && echo "no longer a folder" > d2
mkdir -p deep/er && echo deep > deep/er/file
echo built > ignored.log
echo finished
"""


@pytest.mark.docker
def test_a_remote_run_brings_back_its_change_not_its_tree(over_tls: Path) -> None:  # noqa: F811
    project = over_tls
    for d in range(10):
        (project / f"d{d}").mkdir()
        for f in range(20):
            (project / f"d{d}" / f"f{f:03d}").write_bytes(os.urandom(20 * 1024))
    (project / "d3" / "f003").write_text("before\n")
    (project / ".gitignore").write_text("*.log\n")
    git("add", ".", cwd=project)
    git("commit", "-qm", "4 MB of files", cwd=project)
    prompt(project, "change", CHANGE_TASK)
    run = iterare("execute", "change", "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    rid = run_id(run.stdout)
    fetched = record(project, rid)["extra"]["fetched"]
    assert (fetched["worktree"], fetched["deleted"]) == ("change", 21), fetched  # d2 and d5/f005
    assert fetched["changed"] >= 6 and fetched["bytes"] < 512 * 1024, fetched
    show = git("show", "--name-status", "--format=", f"iterare/{rid}", cwd=project).stdout
    assert sorted(show.splitlines()) == sorted([
        "A\tbrand-new.txt", "M\td3/f003", "D\td5/f005", "M\td7/f007", "A\td9/link",
        "A\tdeep/er/file", "A\td2", *(f"D\td2/f{f:03d}" for f in range(20))]), show
    assert git("show", f"iterare/{rid}:d3/f003", cwd=project).stdout == "changed\n"
    tree = git("ls-tree", f"iterare/{rid}", "d7/f007", "d9/link", cwd=project).stdout
    assert tree.startswith("100755 ") and "\n120000 " in tree, tree
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "d1" / "f011").read_bytes() == (project / "d1" / "f011").read_bytes()
    assert not (worktree / "ignored.log").exists()  # ignored: it stays on the engine


#: Round 1 leaves a file; rounds 2 and 3 commit theirs; each round sees a clean tree.
ROUNDS_TASK = """\
git status --porcelain | sed 's/^/status: /'
echo "round $ITERARE_ROUND" >> rounds.txt
if [ "$ITERARE_ROUND" -ge 2 ]; then
  git add -A && git commit -qm "agent's own commit in round $ITERARE_ROUND"
fi
"""


@pytest.mark.docker
def test_a_loop_on_a_remote_engine(over_tls: Path) -> None:  # noqa: F811
    project = over_tls
    prompt(project, "rounds", ROUNDS_TASK)
    run = iterare("execute", "rounds", "-f", "--until", 'test "$(wc -l < rounds.txt)" -ge 3',
                  "--stall-after", "0", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    rid = run_id(run.stdout)
    data = record(project, rid)
    assert data["extra"]["loop"]["reason"] == "passed", data["extra"]
    assert [r["check_exit"] for r in data["extra"]["rounds"]] == [1, 1, 0]
    subjects = git("log", "--reverse", "--format=%s", f"main..iterare/{rid}",
                   cwd=project).stdout.splitlines()
    assert subjects == [f"iterare: round 1 of run {rid}", "agent's own commit in round 2",
                        "agent's own commit in round 3"], subjects
    assert not [line for line in run.stdout.splitlines() if line.startswith("status:")], \
        run.stdout
    assert git("show", f"iterare/{rid}:rounds.txt", cwd=project).stdout == (
        "round 1\nround 2\nround 3\n")
