"""The finish's stat cache through the real sandbox: an agent that hides its changes from
stat data (the same size, mtime set back, files swapped, links, set-uid bits, a write in
its first instant) still has every change committed, exactly as a full rehash commits
it; the sidecar stamps the hand-over the cache trusts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (fixture)

pytestmark = pytest.mark.docker

#: Each line hides a change from a stat check that trusts size and mtime.
SNEAKY = """\
poke() { cp -p "$1" /tmp/ref && printf "$2" | dd of="$1" conv=notrunc status=none &&
    touch -r /tmp/ref "$1"; }
poke racy.txt R
poke same.txt B
chmod +x mode.txt
chmod u+s suid.txt
ln -sfn bbb la && ln -sfn aaa lb && touch -h -r /tmp/ref la lb
mv x1 tmp && mv x2 x1 && mv tmp x2 && touch -r /tmp/ref x1 x2
ln -f h1 h2
rm f2d && mkdir f2d && echo inner > f2d/inner
cp -p gone.txt /tmp/gone && rm gone.txt
printf 'gone-0ne\\n' > gone.txt && touch -r /tmp/gone gone.txt
chmod 600 kept.txt && chmod 644 kept.txt
find / -path /proc -prune -o -path /sys -prune -o -name "trees-given*" -print 2>/dev/null |
    grep -q . || echo "no stamp in reach"
"""


def test_changes_hidden_from_stat_data_are_all_committed(project: Path  # noqa: F811
                                                         ) -> None:
    files = {"racy.txt": "racy-0\n", "same.txt": "same-0\n", "mode.txt": "mode\n",
             "suid.txt": "suid\n", "x1": "one\n", "x2": "two\n", "h1": "link-1\n",
             "h2": "link-2\n", "f2d": "file\n", "gone.txt": "gone-one\n", "kept.txt": "k\n",
             "aaa": "a\n", "bbb": "b\n"}
    for name, text in files.items():
        (project / name).write_text(text)
    for i in range(200):  # files nobody touches: taken from the base, not read
        (project / "many" / f"f{i}").parent.mkdir(exist_ok=True)
        (project / "many" / f"f{i}").write_text(f"{i}\n")
    (project / "la").symlink_to("aaa")
    (project / "lb").symlink_to("bbb")
    git("add", "-A", cwd=project)
    git("commit", "-qm", "files", cwd=project)
    prompt(project, "sneaky", SNEAKY)
    started = iterare("execute", "sneaky", "--follow", cwd=project)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert record(project, rid)["status"] == "succeeded", started.stderr
    stamp = project / ".git" / "iterare" / "state" / rid / "out" / "trees-given"
    assert stamp.is_file(), "the sidecar stamped no hand-over"
    assert "no stamp in reach" in iterare("log", rid, cwd=project).stdout

    def show(path: str) -> str:
        return git("show", f"iterare/{rid}:{path}", cwd=project).stdout

    assert show("racy.txt") == "Racy-0\n"
    assert show("same.txt") == "Bame-0\n"
    assert show("x1") == "two\n" and show("x2") == "one\n"
    assert show("h2") == "link-1\n"
    assert show("f2d/inner") == "inner\n"
    assert show("gone.txt") == "gone-0ne\n"
    listing = git("ls-tree", "-r", f"iterare/{rid}", cwd=project).stdout
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes["mode.txt"] == "100755" and modes["suid.txt"] == "100644"
    assert git("cat-file", "-p", f"iterare/{rid}:la", cwd=project).stdout == "bbb"
    assert git("cat-file", "-p", f"iterare/{rid}:lb", cwd=project).stdout == "aaa"
    changed = git("diff", "--name-only", "HEAD", f"iterare/{rid}", cwd=project).stdout.split()
    assert sorted(changed) == sorted(["racy.txt", "same.txt", "mode.txt", "la", "lb", "x1",
                                      "x2", "h2", "f2d", "f2d/inner", "gone.txt"])
    # What a full rehash says of the worktree: nothing left out of the commit.
    worktree = project / ".iterare" / "worktrees" / rid
    assert git("status", "--porcelain", "--untracked-files=all", cwd=worktree).stdout == ""
