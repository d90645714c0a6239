"""Run worktree and gitdir, finishing a run, merge, cleanup: real git in temp repositories.

The container's view is simulated on the host: ``GIT_DIR=<run gitdir>
GIT_WORK_TREE=<worktree>``, with the run gitdir's alternates naming the run's objects view
on the host (in production it names ``/git/objects``, where the view is mounted read-only).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed, UserError
from git_iterare.git import repo as repo_mod
from git_iterare.git.hostexec import host_executable_changes
from git_iterare.git.merge import diff_run, merge_run
from git_iterare.runner import importer, teardown, workspace
from git_iterare.sandbox import spec as sandbox_spec
from tests.conftest import git

RUN = "demo-0123abcd"
TRAILERS = {"Iterare-Run": RUN, "Iterare-Agent": "shell", "Iterare-Prompt": "prompts/x.md"}


def prepare(path: Path, run_id: str = RUN, base: str = "HEAD") -> workspace.RunWorkspace:
    r = repo_mod.discover(path)
    return workspace.prepare_run(r, run_id, base,
                                 alternates=str(workspace.objects_view_path(r, run_id)))


def agent(ws: workspace.RunWorkspace, *args: str, check: bool = True
          ) -> subprocess.CompletedProcess:
    """git as the agent runs it inside the container (its own gitdir, shared objects)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_"))}
    env.update(GIT_DIR=str(ws.gitdir), GIT_WORK_TREE=str(ws.worktree))
    return subprocess.run(["git", *args], cwd=ws.worktree, env=env, capture_output=True,
                          text=True, check=check)


def agent_commits(ws: workspace.RunWorkspace, name: str, text: str, message: str) -> None:
    """The agent writes ``name`` in its worktree and commits it."""
    (ws.worktree / name).write_text(text)
    agent(ws, "add", name)
    agent(ws, "commit", "-qm", message)


def finish(path: Path, ws: workspace.RunWorkspace) -> importer.FinishResult:
    return importer.finish_run(repo_mod.discover(path), ws, TRAILERS, "iterare: leftovers")


def tree_of(path: Path, rev: str) -> dict[str, str]:
    """path -> "mode blob-content" for every file in ``rev``."""
    out = git("ls-tree", "-r", "-z", rev, cwd=path).stdout
    files = {}
    for entry in filter(None, out.split("\0")):
        meta, name = entry.split("\t", 1)
        mode, _, sha = meta.split()
        files[name] = f"{mode} {git('cat-file', 'blob', sha, cwd=path).stdout}"
    return files


def fingerprint(gitdir: Path) -> dict[str, str]:
    """Hashes of every file in the user's gitdir that finishing a run must not touch.

    Only objects, the run's branch and its reflog, the run worktree's registration and
    git iterare's own ``iterare/`` dir may change.
    """
    allowed = ("objects/", "iterare/", "worktrees/", "refs/heads/iterare/",
               "logs/refs/heads/iterare/")
    return {rel: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(gitdir.rglob("*"))
            if p.is_file() and not (rel := p.relative_to(gitdir).as_posix()).startswith(allowed)}


def state(path: Path) -> tuple[str, ...]:
    """Everything a merge must leave as it was."""
    return (git("rev-parse", "HEAD", cwd=path).stdout,
            git("status", "--porcelain", "--untracked-files=all", cwd=path).stdout,
            git("diff", cwd=path).stdout, git("diff", "--cached", cwd=path).stdout,
            git("ls-files", "-s", cwd=path).stdout)


def test_prepare_layout(repo: Path) -> None:
    ws = prepare(repo)
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    assert ws.base_commit == head
    assert git("rev-parse", "iterare/" + RUN, cwd=repo).stdout.strip() == head
    assert ws.worktree == repo / ".iterare" / "worktrees" / RUN
    assert (ws.worktree / "README.md").read_text() == "hello\n"
    assert ws.gitdir == repo / ".git" / "iterare" / "gitdirs" / RUN
    assert (ws.gitdir / "HEAD").read_text() == f"ref: refs/heads/iterare/{RUN}\n"
    view = repo / ".git" / "iterare" / "gitdirs" / f"{RUN}.objects"
    assert (ws.gitdir / "objects/info/alternates").read_text() == f"{view}\n"
    assert ws.gitfile.read_text() == "gitdir: /git/run\n"
    assert [(m.host_path, m.container_path, m.read_only) for m in ws.mounts] == [
        (ws.worktree, "/workspace", False), (ws.gitfile, "/workspace/.git", True),
        (ws.gitdir, "/git/run", False), (view, "/git/objects", True)]
    assert "/.iterare/worktrees/\n" in (repo / ".git/info/exclude").read_text()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo).stdout == ""
    # A uid no host account has; the sandbox's sidecar gives it the trees later.
    assert (ws.agent_uid, ws.agent_gid) == sandbox_spec.agent_ids()
    assert ws.agent_uid != os.geteuid()
    assert stat.S_IMODE(ws.worktree.parent.stat().st_mode) == 0o700
    # Run gitdirs and live worktrees: the user's to enter by name, nobody's to list.
    for p in (ws.gitdir.parent, repo / ".git" / "iterare" / "live"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o300
    # the container's view: clean, on the run branch, history visible through alternates
    assert agent(ws, "status", "--porcelain").stdout == ""
    assert agent(ws, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip() == f"iterare/{RUN}"
    assert agent(ws, "log", "--format=%s").stdout == "initial\n"
    assert agent(ws, "config", "user.name").stdout.strip() == workspace.AGENT_NAME


def test_prepare_refuses_existing_run_and_bad_input(repo: Path) -> None:
    prepare(repo)
    with pytest.raises(OperationFailed, match="branch iterare/demo-0123abcd exists"):
        prepare(repo)
    with pytest.raises(UserError, match="invalid run id"):
        prepare(repo, "../evil-0123abcd")
    with pytest.raises(UserError, match="is not a commit"):
        prepare(repo, "other-0123abcd", "nosuchbranch")
    with pytest.raises(UserError, match="must not run as root"):
        workspace.agent_ids(0)


def test_agent_work_comes_back_with_trailers(repo: Path) -> None:
    (repo / "gone.txt").write_text("to delete\n")
    git("add", "gone.txt", cwd=repo)
    git("commit", "-qm", "more", cwd=repo)
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "one\n", "agent: a")
    agent_commits(ws, "b.txt", "two\n", "agent: b")
    (ws.worktree / "README.md").write_text("hello\nedited\n")  # left uncommitted
    (ws.worktree / "gone.txt").unlink()                       # deleted, uncommitted
    (ws.worktree / "new" / "deep").mkdir(parents=True)
    (ws.worktree / "new" / "deep" / "c.txt").write_text("three\n")  # untracked
    result = finish(repo, ws)
    branch = f"iterare/{RUN}"
    assert result.head == git("rev-parse", branch, cwd=repo).stdout.strip()
    assert result.autocommitted
    assert len(result.commits) == 3
    assert result.changes == importer.Changes(files=5, insertions=4, deletions=1)
    assert tree_of(repo, branch) == {
        "README.md": "100644 hello\nedited\n", "a.txt": "100644 one\n",
        "b.txt": "100644 two\n", "new/deep/c.txt": "100644 three\n"}
    log = git("log", "--format=%an|%s", f"main..{branch}", cwd=repo).stdout.splitlines()
    assert log == ["git-iterare agent|iterare: leftovers", "git-iterare agent|agent: b",
                   "git-iterare agent|agent: a"]
    trailers = git("log", "-1", "--format=%(trailers:only)", branch, cwd=repo).stdout
    assert trailers == ("Iterare-Run: demo-0123abcd\nIterare-Agent: shell\n"
                        "Iterare-Prompt: prompts/x.md\n\n")
    # The agent's identity, never the user's: their git may have none (useConfigOnly).
    assert git("log", "-1", "--format=%an <%ae>|%cn <%ce>", branch, cwd=repo).stdout == (
        "git-iterare agent <agent@git-iterare.invalid>|"
        "git-iterare agent <agent@git-iterare.invalid>\n")
    reflog = git("reflog", "-1", "--format=%gs", branch, cwd=repo).stdout
    assert reflog == f"iterare: finish run {RUN}: commit uncommitted work\n"
    # the user can cd into the run worktree and git sees it clean
    assert git("status", "--porcelain", cwd=ws.worktree).stdout == ""
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo).stdout == ""

    again = finish(repo, ws)
    assert again.head == result.head and again.commits == result.commits
    assert not again.autocommitted and again.imported_objects == 0


@pytest.mark.parametrize("move", [["checkout", "-q", "-b", "sidework"],
                                  ["checkout", "-q", "--detach"]])
def test_commits_on_another_branch_or_detached_head_are_imported(
        repo: Path, move: list[str]) -> None:
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "one\n", "agent: on the run branch")
    agent(ws, *move)
    agent_commits(ws, "b.txt", "two\n", "agent: moved off")
    (ws.worktree / "c.txt").write_text("three\n")  # left uncommitted
    result = finish(repo, ws)
    branch = f"iterare/{RUN}"
    log = git("log", "--format=%s", f"main..{branch}", cwd=repo).stdout.splitlines()
    assert log == ["iterare: leftovers", "agent: moved off", "agent: on the run branch"]
    where = "branch sidework" if "-b" in move else "a detached HEAD"
    assert result.notes == (f"the agent committed on {where}: its 1 commit(s) there were "
                            f"imported onto {branch}",)
    again = finish(repo, ws)
    assert again.head == result.head and again.notes == ()


def test_side_branch_not_descending_from_the_run_branch_is_named(repo: Path) -> None:
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "one\n", "agent: a")
    agent(ws, "checkout", "-q", "-b", "other", ws.base_commit)
    agent_commits(ws, "b.txt", "two\n", "agent: b")
    result = finish(repo, ws)
    assert len(result.notes) == 1 and "branch other" in result.notes[0]
    assert "not imported" in result.notes[0]
    assert tree_of(repo, result.head) == {"README.md": "100644 hello\n",
                                          "b.txt": "100644 two\n"}


def test_finish_without_agent_commits(repo: Path) -> None:
    ws = prepare(repo)
    base = ws.base_commit
    result = finish(repo, ws)
    assert (result.head, result.commits, result.autocommitted) == (base, (), False)
    (ws.worktree / "README.md").write_text("changed\n")
    result = finish(repo, ws)
    assert result.autocommitted and len(result.commits) == 1
    assert tree_of(repo, result.head) == {"README.md": "100644 changed\n"}


def test_nested_repos_symlinks_and_includes(repo: Path) -> None:
    (repo / ".gitignore").write_text(".env\n")
    (repo / ".env").write_text("TOKEN=secret\n")
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("# secrets for the tests\n.env\n")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-qm", "ignore .env", cwd=repo)
    ws = prepare(repo)
    assert ws.included == (".env",)
    assert (ws.worktree / ".env").read_text() == "TOKEN=secret\n"
    assert agent(ws, "status", "--porcelain").stdout == ""
    (ws.worktree / ".gitignore").write_text("")  # the agent un-ignores .env
    sub = ws.worktree / "vendor" / "lib"
    sub.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    (sub / "code.py").write_text("x = 1\n")
    (ws.worktree / "outside").symlink_to("/etc/passwd")
    (ws.worktree / "src").mkdir()
    (ws.worktree / "src" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws.worktree / "src" / "run.sh", 0o755)
    result = finish(repo, ws)
    assert result.nested_repos == ("vendor/lib",)
    assert tree_of(repo, result.head) == {
        ".gitignore": "100644 ", "README.md": "100644 hello\n",
        "outside": "120000 /etc/passwd", "src/run.sh": "100755 #!/bin/sh\n"}


def test_includes_come_from_the_worktree_the_command_runs_in(repo: Path,
                                                            tmp_path: Path) -> None:
    """In a linked worktree, its own ``.iterare/include`` and the files it names are what
    trust reviewed there, so they are what the run gets (not the main worktree's)."""
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("main.env\n")
    (repo / "main.env").write_text("MAIN=1\n")
    linked = tmp_path / "linked"
    git("worktree", "add", "-q", "-b", "side", str(linked), "main", cwd=repo)
    (linked / ".iterare").mkdir()
    (linked / ".iterare" / "include").write_text("linked.env\n")
    (linked / "linked.env").write_text("LINKED=1\n")
    ws = prepare(linked)
    assert ws.included == ("linked.env",)
    assert (ws.worktree / "linked.env").read_text() == "LINKED=1\n"
    assert not (ws.worktree / "main.env").exists()


def test_an_included_file_the_base_tracks_is_committed_like_any_other(repo: Path) -> None:
    """``.iterare/include`` naming a tracked file (and, by a glob, an untracked one whose
    name holds glob characters): the tracked one is checked out as the base has it (the
    user's uncommitted edit stays out), and the agent's edit to it is committed, never a
    deletion; the untracked one is copied in and left out of the commit, while the
    agent's new file that its name would match as a glob is committed."""
    (repo / "settings.json").write_text("{}\n")
    git("add", "settings.json", cwd=repo)
    git("commit", "-qm", "settings", cwd=repo)
    (repo / "settings.json").write_text('{"mine": 1}\n')  # the user's uncommitted edit
    (repo / "conf[1].env").write_text("LOCAL=1\n")
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("settings.json\n*.env\n")
    ws = prepare(repo)
    assert ws.included == ("conf[1].env",)
    assert (ws.worktree / "settings.json").read_text() == "{}\n"
    assert (ws.worktree / "conf[1].env").read_text() == "LOCAL=1\n"
    (ws.worktree / "conf1.env").write_text("the agent's\n")
    result = finish(repo, ws)
    assert git("diff", "--name-only", "HEAD", result.head, cwd=repo).stdout.split() == [
        "conf1.env"]
    (ws.worktree / "settings.json").write_text('{"agent": 1}\n')
    again = finish(repo, ws)
    assert tree_of(repo, again.head)["settings.json"] == '100644 {"agent": 1}\n'
    assert "conf[1].env" not in tree_of(repo, again.head)


def test_include_names_are_taken_literally_and_kept_for_the_finish(repo: Path) -> None:
    """A tracked file named ``:cfg`` (pathspec magic to git) is known as tracked: the
    user's uncommitted edit to it stays out of the run. What was copied in is what the
    finish leaves out, even after ``.iterare/include`` changed or broke meanwhile."""
    (repo / ":cfg").write_text("base\n")
    git("add", "--", ":(literal):cfg", cwd=repo)
    git("commit", "-qm", "cfg", cwd=repo)
    (repo / ":cfg").write_text("the user's private edit\n")
    (repo / ".env").write_text("SECRET=1\n")
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text(":cfg\n.env\n")
    ws = prepare(repo)
    assert ws.included == (".env",)
    assert (ws.worktree / ":cfg").read_text() == "base\n"
    agent(ws, "add", "-A")  # the agent's own commit leaves the include out too
    assert ".env" not in agent(ws, "diff", "--cached", "--name-only").stdout
    (repo / ".iterare" / "include").write_text(".\n")  # broken since: not read again
    # The agent moves the copy (a refactor moving a folder would), and makes an empty file.
    (ws.worktree / "conf").mkdir()
    (ws.worktree / ".env").rename(ws.worktree / "conf" / "moved.env")
    (ws.worktree / "__init__.py").write_text("")
    again = workspace.open_run(repo_mod.discover(repo), RUN, ws.base_commit)
    assert again.included == (".env",)
    result = finish(repo, again)
    assert ".env" not in tree_of(repo, result.head)
    assert "conf/moved.env" not in tree_of(repo, result.head)
    assert tree_of(repo, result.head)["__init__.py"] == "100644 "
    assert tree_of(repo, result.head)[":cfg"] == "100644 base\n"


@pytest.mark.parametrize("line", [".", "./", "x/***", "a\udcffb"])
def test_an_include_line_that_is_no_glob_is_one_error(repo: Path, line: str) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_bytes(os.fsencode(line) + b"\n")
    r = repo_mod.discover(repo)
    if line == "a\udcffb":  # not UTF-8: read as it is, a name matching nothing
        assert workspace.include_paths(r) == ()
        return
    with pytest.raises(UserError, match="is not a file name or glob"):
        workspace.include_paths(r)


def _markers(tmp: Path) -> list[Path]:
    return [tmp / f"ran-{n}" for n in ("filter", "fsmonitor", "hook", "sub-fsmonitor",
                                        "global-filter")]


def test_malicious_agent_cannot_run_anything_on_the_host(
        repo: Path, tmp_path: Path, hermetic_env: Path) -> None:
    ws = prepare(repo)
    agent_commits(ws, "work.txt", "committed by the agent\n", "agent work")
    before = fingerprint(repo / ".git")
    assert {"config", "HEAD", "index", "refs/heads/main", "info/exclude"} <= set(before)
    m_filter, m_fsmon, m_hook, m_sub, m_global = _markers(tmp_path)
    # the user defines a filter globally (like git-lfs): it must not run on agent content
    with open(hermetic_env / ".gitconfig", "a") as f:
        f.write(f"[filter \"evil\"]\n\tclean = \"touch {m_global}; cat\"\n\trequired = true\n")
    # the agent: attributes naming the filter, and config/hooks in its own gitdir
    (ws.worktree / ".gitattributes").write_text("* filter=evil diff=evil\n")
    with open(ws.gitdir / "config", "a") as f:
        f.write(f"[filter \"evil\"]\n\tclean = \"touch {m_filter}; cat\"\n"
                f"[core]\n\tfsmonitor = \"touch {m_fsmon}; false\"\n"
                f"\thooksPath = {ws.gitdir / 'hooks'}\n")
    hooks = ws.gitdir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("pre-commit", "post-commit", "commit-msg", "post-checkout", "post-index-change",
                 "reference-transaction"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {m_hook}\n")
        os.chmod(hooks / name, 0o755)
    # a nested repository with an fsmonitor, and a `.git` symlink to the user's gitdir
    nested = ws.worktree / "nested"
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    with open(nested / ".git" / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = \"touch {m_sub}; false\"\n")
    (nested / "f.txt").write_text("nested\n")
    (ws.worktree / "trick").mkdir()
    (ws.worktree / "trick" / ".git").symlink_to(repo / ".git")
    (ws.worktree / "trick" / "x").write_text("x\n")
    # alternates pointed elsewhere
    (ws.gitdir / "objects/info/alternates").write_text(f"{tmp_path}/decoy\n")
    (ws.worktree / "work.txt").write_text("edited, uncommitted\n")

    result = finish(repo, ws)
    assert [m for m in _markers(tmp_path) if m.exists()] == []
    assert fingerprint(repo / ".git") == before
    assert result.nested_repos == ("nested", "trick")
    assert tree_of(repo, result.head) == {
        ".gitattributes": "100644 * filter=evil diff=evil\n", "README.md": "100644 hello\n",
        "work.txt": "100644 edited, uncommitted\n"}
    assert git("config", "--get-regexp", "filter|fsmonitor|hookspath", cwd=repo,
               check=False).stdout == "filter.evil.clean touch " + str(m_global) + "; cat\n" \
        "filter.evil.required true\n"
    # the nested repositories were disabled, so a user's git there cannot spring them
    from git_iterare.git.safegit import DISABLED_GIT

    assert not (nested / ".git").exists() and (nested / DISABLED_GIT / "config").is_file()
    # control: the traps are armed; plain git in the agent's view or the nested repo
    # springs them (that is the agent's own business inside its container)
    (ws.worktree / "work.txt").write_text("again\n")
    # (the agent's git needs the shared objects back: with whole-second stat checks it
    # no longer rehashes, and so re-stores, every file the sandbox chowned)
    (ws.gitdir / "objects/info/alternates").write_text(f"{repo / '.git' / 'objects'}\n")
    agent(ws, "commit", "-qam", "x")
    subprocess.run(["git", "status"], cwd=nested, capture_output=True, check=True,
                   env={**os.environ, "GIT_DIR": str(nested / DISABLED_GIT),
                        "GIT_WORK_TREE": str(nested)})
    assert [m.exists() for m in (m_filter, m_fsmon, m_hook, m_sub)] == [True] * 4
    for m in _markers(tmp_path):
        m.unlink(missing_ok=True)
    cleanup = teardown.cleanup_run(repo_mod.discover(repo), ws, force=True)
    assert cleanup.removed_worktree and not ws.worktree.exists()
    assert [m for m in _markers(tmp_path) if m.exists()] == []
    assert fingerprint(repo / ".git") == before


def test_odd_refs_and_objects_are_not_imported(repo: Path) -> None:
    ws = prepare(repo)
    ref = ws.gitdir / ws.ref
    r = repo_mod.discover(repo)

    def rejected() -> str | None:
        return importer.finish_run(r, ws, TRAILERS, "x").rejected_head

    ref.unlink()
    ref.symlink_to(repo / ".git" / "refs" / "heads" / "main")
    assert "is a symlink; refusing to read the run's ref" in (rejected() or "")
    ref.unlink()
    ref.write_text("ref: refs/heads/main\n")
    assert "does not hold a commit id" in (rejected() or "")
    # an orphan history: does not descend from the base
    ref.unlink()
    agent(ws, "checkout", "-q", "--orphan", "iterare/" + RUN)
    agent(ws, "commit", "-qm", "orphan")
    assert "does not descend from its base" in (rejected() or "")
    assert git("rev-parse", f"iterare/{RUN}", cwd=repo).stdout.strip() == ws.base_commit
    # a FIFO in the object dir would hang a reader
    agent(ws, "reset", "-q", "--hard", ws.base_commit)
    agent_commits(ws, "y", "y\n", "y")
    fifo = ws.gitdir / "objects" / "pack" / "trap.pack"
    os.mkfifo(fifo)
    result = importer.finish_run(r, ws, TRAILERS, "x")
    assert "not a regular file or directory" in (result.rejected_head or "")
    # nothing of the agent's history came in, but its files did (nothing is lost)
    assert result.autocommitted and result.commits == (result.head,)
    assert git("rev-parse", f"iterare/{RUN}~", cwd=repo).stdout.strip() == ws.base_commit
    assert tree_of(repo, result.head) == {"README.md": "100644 hello\n", "y": "100644 y\n"}
    fifo.unlink()
    # a loose object whose content does not match its name
    head = agent(ws, "rev-parse", "HEAD").stdout.strip()
    loose = ws.gitdir / "objects" / head[:2] / head[2:]
    os.chmod(loose, stat.S_IWUSR | stat.S_IRUSR)
    other = agent(ws, "rev-parse", "HEAD^{tree}").stdout.strip()
    loose.write_bytes((ws.gitdir / "objects" / other[:2] / other[2:]).read_bytes())
    again = importer.finish_run(r, ws, TRAILERS, "x")
    assert "corrupt or of the wrong type" in (again.rejected_head or "")
    assert (again.head, again.autocommitted) == (result.head, False)
    with pytest.raises(OperationFailed, match="commits that were not imported"):
        teardown.cleanup_run(r, ws)


def _conflicting_run(repo: Path) -> workspace.RunWorkspace:
    ws = prepare(repo)
    (ws.worktree / "README.md").write_text("agent version\n")
    (ws.worktree / "added.txt").write_text("new file\n")
    finish(repo, ws)
    (repo / "README.md").write_text("user version\n")
    git("commit", "-qam", "user edit", cwd=repo)
    return ws


def test_merge_conflict_leaves_everything_as_it_was(repo: Path) -> None:
    _conflicting_run(repo)
    (repo / "untracked.txt").write_text("mine\n")
    (repo / "README.md").touch()
    before = state(repo)
    with pytest.raises(OperationFailed, match=r"conflicts in README\.md; nothing was changed"
                       ) as err:
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}", message="merge run")
    assert err.value.exit_code == 1
    assert state(repo) == before
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    with pytest.raises(OperationFailed, match=r"conflicts in README\.md"):
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}", squash=True)
    assert state(repo) == before
    assert not (repo / ".git" / "SQUASH_MSG").exists()


def test_merge_refuses_dirty_tree(repo: Path) -> None:
    _conflicting_run(repo)
    (repo / "README.md").write_text("uncommitted\n")
    before = state(repo)
    with pytest.raises(OperationFailed, match="uncommitted changes"):
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}")
    assert state(repo) == before


def test_merge_squash_noff_and_hooks_off(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    (repo / ".githooks").mkdir()
    git("config", "core.hooksPath", ".githooks", cwd=repo)
    ws = prepare(repo)
    hook = ws.worktree / ".githooks" / "post-merge"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(hook, 0o755)
    (ws.worktree / ".envrc").write_text("export X=1\n")
    (ws.worktree / "ok.py").write_text("print(1)\n")
    (ws.worktree / "sub").mkdir()
    (ws.worktree / "sub" / "package.json").write_text("{}\n")
    (ws.worktree / "README.md").unlink()
    result = finish(repo, ws)
    r = repo_mod.discover(repo)
    changes = host_executable_changes(r, ws.base_commit, result.head)
    assert [(c.path, c.reason) for c in changes] == [
        (".envrc", "direnv runs it when you cd into the directory"),
        (".githooks/post-merge", "git hooks directory named by core.hooksPath"),
        ("sub/package.json",
         "npm scripts (install/test lifecycle scripts run automatically)")]
    merged = merge_run(r, f"iterare/{RUN}", no_ff=True, message="merge the run")
    assert not merged.fast_forward and not merged.up_to_date
    assert git("log", "-1", "--format=%s%n%p", cwd=repo).stdout.split() == [
        "merge", "the", "run", merged.head_before[:7], result.head[:7]]
    assert not marker.exists()
    assert merge_run(r, f"iterare/{RUN}").up_to_date


def test_merge_squash_and_fast_forward(repo: Path) -> None:
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "a\n", "a")
    (ws.worktree / "b.txt").write_text("b\n")
    result = finish(repo, ws)
    r = repo_mod.discover(repo)
    squashed = merge_run(r, f"iterare/{RUN}", squash=True, message="squashed run")
    assert squashed.squashed and not squashed.fast_forward
    assert git("log", "--format=%s", cwd=repo).stdout == "squashed run\ninitial\n"
    assert git("rev-parse", "HEAD^{tree}", cwd=repo).stdout == \
        git("rev-parse", f"{result.head}^{{tree}}", cwd=repo).stdout
    git("reset", "-q", "--hard", "HEAD~", cwd=repo)
    ff = merge_run(r, f"iterare/{RUN}")
    assert ff.fast_forward and ff.head_after == result.head


def test_diff_run_passes_options_through(repo: Path, capfd: pytest.CaptureFixture[str]
                                         ) -> None:
    ws = prepare(repo)
    (ws.worktree / "README.md").write_text("hello\nworld\n")
    result = finish(repo, ws)
    code = diff_run(repo_mod.discover(repo), ws.base_commit, result.head, ["--stat"])
    assert code == 0
    assert capfd.readouterr().out == \
        " README.md | 1 +\n 1 file changed, 1 insertion(+)\n"
    assert diff_run(repo_mod.discover(repo), ws.base_commit, result.head,
                    ["--exit-code", "--quiet", "--", "nothing"]) == 0
    assert diff_run(repo_mod.discover(repo), ws.base_commit, result.head,
                    ["--quiet", "--exit-code"]) == 1


def test_cleanup_refuses_unmerged_and_unfinished_work(repo: Path) -> None:
    r = repo_mod.discover(repo)
    ws = prepare(repo)
    (ws.worktree / "work.txt").write_text("work\n")
    with pytest.raises(OperationFailed, match="the worktree has uncommitted changes") as err:
        teardown.cleanup_run(r, ws)
    assert err.value.hint == (f"`git iterare merge {RUN}` first, or "
                              f"`git iterare cleanup --force {RUN}`")
    result = finish(repo, ws)
    with pytest.raises(OperationFailed, match="is not merged into any local branch"):
        teardown.cleanup_run(r, ws)
    assert ws.worktree.is_dir() and ws.gitdir.is_dir()
    merge_run(r, f"iterare/{RUN}")
    done = teardown.cleanup_run(r, ws)
    assert done == teardown.CleanupResult(RUN, True, True, result.head)
    assert not ws.worktree.exists() and not ws.gitdir.exists() and not ws.gitfile.exists()
    assert git("branch", "--list", "iterare/*", cwd=repo).stdout == ""
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 1


def test_cleanup_refuses_work_left_on_a_stash_or_another_branch(repo: Path) -> None:
    """The agent stashed work and committed on a side branch, then went back: neither is
    on the run's branch, and cleanup must not delete the only copy."""
    r = repo_mod.discover(repo)
    ws = prepare(repo)
    agent(ws, "checkout", "-qb", "side")
    agent_commits(ws, "side.txt", "side\n", "side work")
    agent(ws, "checkout", "-q", f"iterare/{RUN}")
    (ws.worktree / "README.md").write_text("stashed\n")
    agent(ws, "stash", "-q")
    finish(repo, ws)
    merge_run(r, f"iterare/{RUN}")
    with pytest.raises(OperationFailed, match=r"not imported \(refs/"):
        teardown.cleanup_run(r, ws)
    # Packed behind 60 tags, they are still found (tags once filled the refs looked at).
    for i in range(60):
        agent(ws, "tag", f"t{i}")
    agent(ws, "pack-refs", "--all")
    with pytest.raises(OperationFailed, match=r"not imported \(refs/heads/side, refs/stash"):
        teardown.cleanup_run(r, ws)
    # An unreadable packed-refs could hide them: not taken as no work (the run's own
    # branch is a loose ref again, so only the check of the others reads it).
    own = ws.gitdir / "refs" / "heads" / "iterare" / RUN
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(agent(ws, "rev-parse", f"iterare/{RUN}").stdout)
    packed = ws.gitdir / "packed-refs"
    packed.rename(ws.gitdir / "packed-refs.real")
    packed.symlink_to("packed-refs.real")
    with pytest.raises(OperationFailed, match="could not all be checked"):
        teardown.cleanup_run(r, ws)
    assert ws.gitdir.is_dir()
    assert teardown.cleanup_run(r, ws, force=True).removed_gitdir


def test_cleanup_takes_tags_and_notes_of_imported_work_as_no_work(repo: Path) -> None:
    r = repo_mod.discover(repo)
    ws = prepare(repo)
    agent_commits(ws, "t.txt", "t\n", "t")
    agent(ws, "tag", "-a", "v2", "-m", "annotated")
    agent(ws, "notes", "add", "-m", "a note", "HEAD")
    finish(repo, ws)
    merge_run(r, f"iterare/{RUN}")
    assert teardown.cleanup_run(r, ws).removed_gitdir


def test_cleanup_force_keeps_objects(repo: Path) -> None:
    r = repo_mod.discover(repo)
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "a\n", "a")
    head = agent(ws, "rev-parse", "HEAD").stdout.strip()
    with pytest.raises(OperationFailed, match="commits that were not imported"):
        teardown.cleanup_run(r, ws)
    finish(repo, ws)
    done = teardown.cleanup_run(r, ws, force=True)
    assert done.deleted_branch == head
    assert git("cat-file", "-t", head, cwd=repo).stdout == "commit\n"


def test_reuse_starts_from_previous_head(repo: Path) -> None:
    r = repo_mod.discover(repo)
    first = prepare(repo)
    (first.worktree / "a.txt").write_text("a\n")
    with pytest.raises(OperationFailed, match="unfinished work"):
        teardown.reuse_run(r, first, "demo-89abcdef")
    head = finish(repo, first).head
    second = teardown.reuse_run(r, first, "demo-89abcdef",
                                 alternates=str(r.common_dir / "objects"))
    assert second.base_commit == head
    assert (second.worktree / "a.txt").read_text() == "a\n"
    assert agent(second, "status", "--porcelain").stdout == ""
    reopened = workspace.open_run(r, "demo-89abcdef", head)
    assert (reopened.worktree, reopened.gitdir, reopened.branch) == (
        second.worktree, second.gitdir, second.branch)


def test_agent_ids_are_no_accounts_and_not_the_users(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    """The agent's uid/gid: the first number from the base that no account, group or the
    user has; an explicit uid is kept, 0 refused."""
    import pwd

    uid, gid = workspace.agent_ids(None)
    assert uid == gid >= sandbox_spec.AGENT_ID_BASE
    for number in range(sandbox_spec.AGENT_ID_BASE, uid):
        assert sandbox_spec._has_account(number) or number == os.getuid()
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    taken = {sandbox_spec.AGENT_ID_BASE, sandbox_spec.AGENT_ID_BASE + 1}
    monkeypatch.setattr(sandbox_spec, "_has_account", lambda n: n in taken)
    assert sandbox_spec.agent_ids() == (sandbox_spec.AGENT_ID_BASE + 2,) * 2
    monkeypatch.setattr("os.getuid", lambda: sandbox_spec.AGENT_ID_BASE + 2)
    assert sandbox_spec.agent_ids() == (sandbox_spec.AGENT_ID_BASE + 3,) * 2
    assert workspace.agent_ids(1234) == (1234, 1234)
    with pytest.raises(UserError, match="must not run as root"):
        workspace.agent_ids(0)


def test_bad_include_is_refused_before_anything_is_made(repo: Path) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("../secrets\n")
    with pytest.raises(UserError, match=r"\.iterare/include: '\.\./secrets' must be a relative"):
        prepare(repo)
    assert git("branch", "--list", "iterare/*", cwd=repo).stdout == ""
    assert not (repo / ".iterare" / "worktrees").exists()


def test_failed_prepare_rolls_back(repo: Path) -> None:
    r = repo_mod.discover(repo)
    (repo / ".git" / "iterare").mkdir()
    (repo / ".git" / "iterare" / "tmp").write_text("in the way\n")  # building the index fails
    with pytest.raises(FileExistsError):
        workspace.prepare_run(r, RUN, "HEAD")
    assert git("branch", "--list", "iterare/*", cwd=repo).stdout == ""
    assert not workspace.worktree_path(r, RUN).exists()
    assert not workspace.gitdir_path(r, RUN).exists()
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 1
    (repo / ".git" / "iterare" / "tmp").unlink()
    assert prepare(repo).base_commit


def test_merge_refused_by_untracked_file_keeps_it(repo: Path) -> None:
    _conflicting_run(repo)
    git("reset", "-q", "--hard", "HEAD~", cwd=repo)  # no conflict on README any more
    (repo / "added.txt").write_text("the user's own, untracked\n")
    before = state(repo)
    with pytest.raises(OperationFailed) as err:
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}")
    assert err.value.message == (
        "the run writes added.txt, which this worktree has as files git does not track "
        "(ignored ones too); not merging")
    assert state(repo) == before
    assert (repo / "added.txt").read_text() == "the user's own, untracked\n"


def test_merge_refuses_a_changed_file_marked_assume_unchanged(repo: Path) -> None:
    """git status hides the edit; a failed merge's undo (reset --hard) would lose it."""
    _conflicting_run(repo)
    git("update-index", "--assume-unchanged", "README.md", cwd=repo)
    (repo / "README.md").write_text("the user's local edit\n")
    with pytest.raises(OperationFailed, match=r"README\.md changed, though marked assume"):
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}")
    assert (repo / "README.md").read_text() == "the user's local edit\n"


def test_merge_is_not_refused_for_untouched_assume_unchanged_files(repo: Path) -> None:
    """Many files marked assume-unchanged (more names than one command line holds), one
    committed with CRLF under core.autocrlf (its clean form differs from the index), and
    a tracked folder the run turns into a file: nothing is in the way."""
    (repo / "crlf.txt").write_bytes(b"x\r\ny\r\n")
    (repo / "old").mkdir()
    (repo / "old" / "x").write_text("x\n")
    many = repo / ("d" * 200)
    many.mkdir()
    for i in range(12_000):
        (many / f"{i:05d}").write_text("")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "files", cwd=repo)
    ws = prepare(repo)
    agent(ws, "rm", "-rq", "old")
    agent_commits(ws, "old", "now a file\n", "folder to file")
    finish(repo, ws)
    git("config", "core.autocrlf", "true", cwd=repo)
    listed = git("ls-files", "-z", cwd=repo).stdout
    subprocess.run(["git", "update-index", "-z", "--assume-unchanged", "--stdin"], cwd=repo,
                   input=listed, text=True, check=True)
    result = merge_run(repo_mod.discover(repo), f"iterare/{RUN}")
    assert (repo / "old").read_text() == "now a file\n" and not result.up_to_date


def test_merge_never_overwrites_or_deletes_ignored_files(repo: Path) -> None:
    """git overwrites ignored files in a merge (and its abort then deletes them): the run
    force-added files where the user keeps ignored ones (a folder of keys, a local
    setting, a .env that also conflicts); the merge is refused and they stay."""
    (repo / ".gitignore").write_text("*.local\n.env\n")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-qm", "ignore", cwd=repo)
    ws = prepare(repo)
    for name in ("keys.local", "p.local", ".env"):
        (ws.worktree / name).write_text("the agent's\n")
        agent(ws, "add", "-f", name)
    agent(ws, "commit", "-qm", "add local files")
    finish(repo, ws)
    (repo / "keys.local").mkdir()
    (repo / "keys.local" / "id").write_text("PRIVATE KEY\n")
    (repo / "p.local").write_text("mine\n")
    (repo / ".env").write_text("SECRET=user\n")
    with pytest.raises(OperationFailed) as err:
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}", squash=True)
    assert err.value.message.startswith("the run writes .env, keys.local, p.local, which")
    assert (repo / "keys.local" / "id").read_text() == "PRIVATE KEY\n"
    assert (repo / "p.local").read_text() == "mine\n"
    assert (repo / ".env").read_text() == "SECRET=user\n"


@pytest.mark.parametrize("renames", ["conflict", "true"])
def test_merge_sees_a_file_a_folder_rename_moves_onto_an_ignored_one(
        repo: Path, renames: str) -> None:
    """The run adds old/secret.cfg; the user renamed old/ to new/ since and keeps an
    ignored new/secret.cfg: git's merge moves the run's file there (a conflict, or with
    merge.directoryRenames=true a clean merge), which would overwrite or delete it."""
    (repo / "old").mkdir()
    (repo / "old" / "a.txt").write_text("a\n")
    (repo / ".gitignore").write_text("*.cfg\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "old", cwd=repo)
    ws = prepare(repo)
    (ws.worktree / "old" / "secret.cfg").write_text("the agent's\n")
    agent(ws, "add", "-f", "old/secret.cfg")
    agent(ws, "commit", "-qm", "cfg")
    finish(repo, ws)
    git("mv", "old", "new", cwd=repo)
    git("commit", "-qm", "rename", cwd=repo)
    git("config", "merge.directoryRenames", renames, cwd=repo)
    (repo / "new" / "secret.cfg").write_text("the user's\n")
    with pytest.raises(OperationFailed, match=r"the run writes new/secret\.cfg, which"):
        merge_run(repo_mod.discover(repo), f"iterare/{RUN}")
    assert (repo / "new" / "secret.cfg").read_text() == "the user's\n"


def test_alternates_of_the_run_gitdir_are_not_followed(repo: Path, tmp_path: Path) -> None:
    """Objects reachable only through the agent's alternates are not imported."""
    ws = prepare(repo)
    agent_commits(ws, "a.txt", "a\n", "a")
    decoy = tmp_path / "decoy"
    (ws.gitdir / "objects").rename(decoy)
    (ws.gitdir / "objects" / "info").mkdir(parents=True)
    (ws.gitdir / "objects" / "info" / "alternates").write_text(f"{decoy}\n{repo}/.git/objects\n")
    assert agent(ws, "log", "--format=%s").stdout == "a\ninitial\n"  # git itself follows them
    result = finish(repo, ws)
    assert "is missing from the run gitdir" in (result.rejected_head or "")
    assert result.commits == (result.head,) and result.autocommitted


@pytest.mark.parametrize(("path", "mode", "reason"), [
    (".vscode/tasks.json", "100644", "VS Code tasks, can run on folder open"),
    (".vscode/notes.md", "100644", None),
    (".github/workflows/ci.yml", "100644",
     "GitHub Actions workflows: run on CI with its secrets, not here"),
    ("lib/Makefile", "100644", "make recipes"),
    ("tests/conftest.py", "100644", "imported by pytest"),
    ("tools/release", "100755", "executable file"),
    ("tools/build.sh", "100644", "shell script"),
    ("hooks/pre-push", "100644", "git hooks directory named by core.hooksPath"),
    ("src/main.py", "100644", None),
    (".husky/pre-commit", "100644", "husky git hooks, run by git on commit/push"),
    (".iterare/config.toml", "100644", "git iterare config: mounts, egress allowlist, Claude "
     "gateway of the next runs"),
    (".iterare/prompts/next.md", "100644",
     "prompts of the next runs (frontmatter env: passes host secrets)"),
    ("deploy/compose.yml", "100644", "compose file (host mounts, privileged containers)"),
    ("sub/.vscode/tasks.json", "100644", "editor tasks (VS Code runs them, also in nested "
     "folders)"),
])
def test_classify_host_executables(path: str, mode: str, reason: str | None) -> None:
    from git_iterare.git.hostexec import classify

    assert classify(path, mode, "hooks/") == reason


def test_a_committed_git_repository_is_flagged(repo: Path) -> None:
    """A bare repository committed as plain files: its config runs programs when the
    user uses git in there (found by an adversarial test: core.pager)."""
    from git_iterare.git.hostexec import EMBEDDED_REPO_REASON, changed_files

    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    bare = repo / "docs" / "vendor.git"
    (bare / "refs").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[core]\n\tpager = touch /tmp/pwned; cat\n")
    (bare / "description").write_text("x\n")
    (repo / "docs" / "config").write_text("not a repository: no HEAD beside it\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "vendor", cwd=repo)
    r = repo_mod.discover(repo)
    reasons = {c.path: c.reason for c in changed_files(r, base, "HEAD")}
    assert reasons == {"docs/config": None,
                       "docs/vendor.git/HEAD": EMBEDDED_REPO_REASON,
                       "docs/vendor.git/config": EMBEDDED_REPO_REASON,
                       "docs/vendor.git/description": EMBEDDED_REPO_REASON}


def test_symlinks_out_of_the_repository_are_flagged(repo: Path) -> None:
    from git_iterare.git.hostexec import OUTSIDE_SYMLINK_REASON, changed_files

    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    (repo / "d" / "e").mkdir(parents=True)
    os.symlink("/etc/passwd", repo / "abs")
    os.symlink("../../../outside", repo / "d" / "e" / "up")
    os.symlink("../../README.md", repo / "d" / "e" / "inside")
    os.symlink("e/inside", repo / "d" / "rel")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "links", cwd=repo)
    reasons = {c.path: c.reason for c in changed_files(repo_mod.discover(repo), base, "HEAD")}
    assert reasons == {"abs": OUTSIDE_SYMLINK_REASON, "d/e/up": OUTSIDE_SYMLINK_REASON,
                       "d/e/inside": None, "d/rel": None}


def test_symlinked_worktrees_dir_is_refused(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "worktrees").symlink_to(elsewhere)
    with pytest.raises(UserError, match="is a symlink or not a directory"):
        prepare(repo)
    assert list(elsewhere.iterdir()) == []
    assert git("branch", "--list", "iterare/*", cwd=repo).stdout == ""


def test_line_endings_follow_the_repository(repo: Path) -> None:
    (repo / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (repo / "w.txt").write_text("one\ntwo\n")
    git("config", "core.autocrlf", "input", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "crlf", cwd=repo)
    ws = prepare(repo)
    assert (ws.worktree / "w.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert "\tautocrlf = input\n" in (ws.gitdir / "config").read_text()
    assert agent(ws, "status", "--porcelain").stdout == ""
    (ws.worktree / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = finish(repo, ws)
    assert git("show", f"{result.head}:w.txt", cwd=repo).stdout == "one\ntwo\nthree\n"
    assert result.changes == importer.Changes(files=1, insertions=1, deletions=0)


#: prepare_run in a process killed (as by kill -9) after the checkout wrote one file.
KILLED_MID_CHECKOUT = """
import os, sys
from pathlib import Path
from git_iterare.git import checkout, repo as repo_mod
from git_iterare.runner import workspace

def populate(common_dir, worktree, base, index, warnings):
    (Path(worktree) / "a.txt").write_text("a\\\\n")
    os._exit(9)

checkout.populate = populate
r = repo_mod.discover(Path(sys.argv[1]))
workspace.prepare_run(r, sys.argv[2], "HEAD", alternates=str(r.common_dir / "objects"))
"""


def test_a_checkout_cut_short_by_a_kill_is_no_work_and_no_deletion(repo: Path) -> None:
    """kill -9 while the base was checked out left a partial worktree, whose finish
    committed the deletion of every file not yet written, and cleanup wanted --force
    (found by a helper). The agent never started then: the worktree holds no work."""
    for name in ("a.txt", "b.txt", "c.txt"):
        (repo / name).write_text(f"{name}\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "three files", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    done = subprocess.run([sys.executable, "-c", KILLED_MID_CHECKOUT, str(repo), RUN],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 9, done.stderr
    r = repo_mod.discover(repo)
    ws = workspace.open_run(r, RUN, base)
    assert sorted(p.name for p in ws.worktree.iterdir()) == [".git", "a.txt"]
    assert teardown.unfinished_work(r, ws, base) is None
    result = finish(repo, ws)
    assert result.head == base  # nothing committed: no deletion of b.txt and c.txt
    assert git("rev-parse", f"iterare/{RUN}", cwd=repo).stdout.strip() == base
    teardown.cleanup_run(r, ws)  # no --force needed
    assert not ws.worktree.exists()
