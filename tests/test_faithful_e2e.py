"""Issue 9, items 1-3, through the real sandbox: `git iterare execute` with the shell agent
on repositories set up the way people have them (sparse checkouts, filters including the
real Git LFS, ident/eol/autocrlf, submodules), then the run branch checked with real git,
`merge` and `cleanup`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.test_faithful import ROT13, add_submodule, blob, changed_paths
from tests.test_runs_e2e import project, prompt, record, run_id  # noqa: F401

pytestmark = pytest.mark.docker


def execute(repo: Path, name: str, body: str) -> str:
    prompt(repo, name, body)
    started = iterare("execute", name, "--follow", cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert record(repo, rid)["status"] == "succeeded"
    return rid


@pytest.mark.parametrize("sparse_args", [("--cone", "app", ".iterare"),
                                         ("--no-cone", "/app/", "/.iterare/", "/*.md")],
                         ids=["cone", "no-cone"])
def test_sparse_checkout_is_no_change(project: Path,  # noqa: F811
                                      sparse_args: tuple[str, ...]) -> None:
    for folder, name, text in (("app", "a", "a\n"), ("docs", "d", "d\n")):
        (project / folder).mkdir()
        (project / folder / name).write_text(text)
    git("add", "app", "docs", cwd=project)
    git("commit", "-qm", "app and docs", cwd=project)
    git("sparse-checkout", "set", *sparse_args, cwd=project)
    assert not (project / "docs").exists()
    base = git("rev-parse", "HEAD", cwd=project).stdout.strip()
    rid = execute(project, "edit", "test -f docs/d && echo sees-docs\necho x >> app/a\n"
                                   "git status --porcelain --untracked-files=no\n")
    assert "sees-docs" in iterare("log", rid, "--raw", cwd=project).stdout
    assert changed_paths(project, base, f"iterare/{rid}") == ["app/a"]
    merged = iterare("merge", "--yes", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert "docs/d" in git("ls-tree", "-r", "--name-only", "HEAD", cwd=project).stdout.split()
    assert not (project / "docs").exists()
    assert (project / "app" / "a").read_text() == "a\nx\n"
    cleaned = iterare("cleanup", "-y", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert git("show", "HEAD:docs/d", cwd=project).stdout == "d\n"


def test_filters_lfs_ident_eol_autocrlf(project: Path, tmp_path: Path) -> None:  # noqa: F811
    assert shutil.which("git-lfs"), "git-lfs is needed (Debian package git-lfs, .ci/setup)"
    repo = project
    marker = tmp_path / "spy-ran"
    for key, value in (("filter.rot.clean", ROT13), ("filter.rot.smudge", ROT13),
                       ("filter.rot.required", "true"), ("core.autocrlf", "true"),
                       ("filter.spy.clean", f"touch {marker}; cat"),
                       ("filter.spy.smudge", f"touch {marker}; cat")):
        git("config", key, value, cwd=repo)
    git("lfs", "install", "--local", cwd=repo)
    git("lfs", "track", "*.bin", cwd=repo)
    with open(repo / ".gitattributes", "a") as f:
        f.write("*.dat filter=rot\n*.c ident\n*.txt text\n*.crlf text eol=crlf\n")
    (repo / "d.dat").write_text("hello secret\n")
    (repo / "big.bin").write_bytes(bytes(range(256)) * 40)
    (repo / "id.c").write_text("/* $Id$ */\n")
    (repo / "t.txt").write_text("one\ntwo\n")
    (repo / "w.crlf").write_text("a\nb\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "filtered files", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    rid = execute(repo, "writer", """\
cat d.dat; od -An -c t.txt | tr -d ' \\n'; echo; head -c 4 big.bin | od -An -tx1
git status --porcelain
printf 'agent bytes\\0\\1' > new.bin
printf 'x\\r\\ny\\r\\n' > new.txt
echo 'the agent too' > new.dat
echo '* filter=spy' > .gitattributes.agent && cat .gitattributes.agent >> .gitattributes
""")
    out = iterare("log", rid, "--raw", cwd=repo).stdout
    assert "hello secret" in out and "one\\r\\ntwo\\r\\n" in out and "00 01 02 03" in out
    assert " M " not in out  # the agent's git saw nothing changed
    head = f"iterare/{rid}"
    assert not marker.exists()
    for name in ("d.dat", "big.bin", "id.c", "t.txt", "w.crlf"):
        assert blob(repo, f"{head}:{name}") == blob(repo, f"{base}:{name}"), name
    assert blob(repo, f"{head}:new.dat") == b"gur ntrag gbb\n"
    assert blob(repo, f"{head}:new.txt") == b"x\ny\n"
    pointer = blob(repo, f"{head}:new.bin").decode()
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1\n")
    oid = pointer.split("oid sha256:")[1].split()[0]
    assert (repo / ".git/lfs/objects" / oid[:2] / oid[2:4] / oid).read_bytes() == \
        b"agent bytes\0\1"
    assert sorted(changed_paths(repo, base, head)) == [
        ".gitattributes", ".gitattributes.agent", "new.bin", "new.dat", "new.txt"]
    # --reuse starts from the agent's tree: its `* filter=spy` runs nowhere
    prompt(repo, "again", "echo more > more.dat\n")
    again = iterare("execute", "again", "--reuse", rid, "--follow", cwd=repo)
    assert again.returncode == 0, again.stdout + again.stderr
    rid2 = run_id(again.stdout)
    assert not marker.exists()
    assert blob(repo, f"iterare/{rid2}:more.dat") == b"zber\n"
    assert blob(repo, f"iterare/{rid2}:big.bin") == blob(repo, f"{base}:big.bin")
    assert iterare("merge", "--yes", rid2, cwd=repo).returncode == 0
    assert blob(repo, "HEAD:new.bin") == pointer.encode()  # (the user's git, merged
    # attributes: the agent's `* filter=spy` now beats `*.bin filter=lfs` in their checkout)
    for rid_ in (rid, rid2):
        assert iterare("cleanup", "-y", rid_, cwd=repo).returncode == 0


def test_submodule_work_is_kept(project: Path, tmp_path: Path) -> None:  # noqa: F811
    recorded = add_submodule(project, tmp_path)
    rid = execute(project, "sub", "cat vendor/lib/lib.c\necho 'int more;' >> vendor/lib/lib.c\n"
                                  "echo 'int added;' > vendor/lib/added.c\n")
    assert "int lib;" in iterare("log", rid, "--raw", cwd=project).stdout
    link = git("rev-parse", f"iterare/{rid}:vendor/lib", cwd=project).stdout.strip()
    assert link != recorded
    modules = project / ".git" / "modules" / "vendor" / "lib"
    assert git("--git-dir", str(modules), "show", f"iterare/{rid}:added.c",
               cwd=project).stdout == "int added;\n"
    assert git("--git-dir", str(modules), "rev-parse", f"iterare/{rid}",
               cwd=project).stdout.strip() == link
    # unmerged: cleanup refuses; merged: the submodule's commit is there to check out
    assert iterare("cleanup", "-y", rid, cwd=project).returncode != 0
    assert iterare("merge", "--yes", rid, cwd=project).returncode == 0
    git("submodule", "update", "-q", cwd=project)
    assert (project / "vendor" / "lib" / "added.c").read_text() == "int added;\n"
    assert iterare("cleanup", "-y", rid, cwd=project).returncode == 0
