"""``git iterare list`` and ``git iterare show`` through the real command."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo as DulwichRepo

from git_iterare.runs.cas import refname
from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import commit_on_branch, head_of, make_run

T0 = "2026-01-01T10:00:00Z"
T1 = "2026-01-01T10:02:05Z"


def finished_run(repo: Path, name: str, status: str = "succeeded", **fields) -> str:
    store = RunStore(repo)
    rec = make_run(repo, name, created=fields.pop("created", T0))
    store.transition(rec.id, "running", started=T0)
    store.transition(rec.id, status, finished=T1, **fields)
    return rec.id


def corrupt_run(repo: Path, run_id: str, files: dict[bytes, bytes]) -> None:
    """Point refs/iterare/runs/<id> at a commit whose tree holds ``files``."""
    r = DulwichRepo(str(repo))
    tree = Tree()
    for name, data in files.items():
        blob = Blob.from_string(data)
        r.object_store.add_object(blob)
        tree.add(name, 0o100644, blob.id)
    r.object_store.add_object(tree)
    c = Commit()
    c.tree = tree.id
    c.author = c.committer = b"t <t@example.com>"
    c.author_time = c.commit_time = 0
    c.author_timezone = c.commit_timezone = 0
    c.message = b"bad\n"
    r.object_store.add_object(c)
    r.refs[refname(f"refs/iterare/runs/{run_id}")] = c.id


def test_list_formats(repo: Path) -> None:
    a = finished_run(repo, "alpha", cost_usd=0.5,
                     changes={"files": 2, "insertions": 10, "deletions": 1})
    b = finished_run(repo, "beta", "failed", created="2026-01-02T00:00:00Z")
    c = finished_run(repo, "gone", created="2025-12-31T00:00:00Z")
    RunStore(repo).transition(c, "cleaned")

    out = iterare("list", "--format", "porcelain", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"{b}\tfailed\tshell\t2026-01-02T00:00:00Z\t125.0\t-\titerare/{b}\t-\t-\t-\n"
        f"{a}\tsucceeded\tshell\t{T0}\t125.0\t0.5\titerare/{a}\t2\t10\t1\n")
    every = iterare("list", "--all", "--format", "porcelain", cwd=repo).stdout.splitlines()
    assert [line.split("\t")[:2] for line in every] == [[b, "failed"], [a, "succeeded"],
                                                        [c, "cleaned"]]
    only = iterare("list", "--status", "cleaned", "--format", "porcelain", cwd=repo).stdout
    assert only.split("\t")[0] == c

    table = iterare("list", cwd=repo).stdout.splitlines()
    assert re.split(r"\s+", table[0]) == ["ID", "STATUS", "AGENT", "AGE", "DURATION", "COST*",
                                          "BRANCH", "CHANGES"]
    assert re.fullmatch(rf"{a}\s+succeeded\s+shell\s+\S+\s+2m05s\s+\$0\.50\s+iterare/{a}\s+"
                        r"2 files \+10 -1", table[2])
    assert table[-1] == "* cost (reported by the agent)"
    colored = iterare("list", "--color=always", cwd=repo).stdout
    assert "\033[32msucceeded\033[0m" in colored and "\033[31mfailed\033[0m" in colored


def test_list_json_shape_is_pinned(repo: Path) -> None:
    a = finished_run(repo, "alpha", cost_usd=0.25, changes={"files": 1, "insertions": 2,
                                                             "deletions": 3})
    rec = RunStore(repo).get(a)
    data = json.loads(iterare("list", "--format", "json", cwd=repo).stdout)
    assert data == {"v": 1, "runs": [{
        "id": a, "status": "succeeded", "name": "alpha", "prompt_name": "alpha",
        "agent": "shell", "branch": f"iterare/{a}", "base_branch": "main",
        "base_commit": rec.base_commit, "head": None, "created": T0, "started": T0,
        "finished": T1, "duration_s": 125.0, "cost_usd": 0.25,
        "changes": {"files": 1, "insertions": 2, "deletions": 3}, "problem": None}]}


def test_list_empty_and_outside_repo(repo: Path, tmp_path: Path) -> None:
    out = iterare("list", cwd=repo)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "no runs (see --all for "
                                                                "cleaned runs)\n")
    assert json.loads(iterare("list", "--format", "json", cwd=repo).stdout) == {"v": 1,
                                                                                "runs": []}
    outside = tmp_path / "nowhere"
    outside.mkdir()
    bad = iterare("list", cwd=outside)
    assert bad.returncode == 2 and bad.stderr.startswith("error: not a git repository")


def test_corrupt_records_are_listed_and_named(repo: Path) -> None:
    good = finished_run(repo, "good")
    corrupt_run(repo, "badjson-0000000a", {b"run.json": b"{nope", b"prompt.md": b""})
    corrupt_run(repo, "badv-0000000b", {b"run.json": b'{"v": 9}', b"prompt.md": b""})
    corrupt_run(repo, "noprompt-0000000c", {b"run.json": b"{}"})
    out = iterare("list", "--format", "porcelain", cwd=repo)
    assert out.returncode == 0
    rows = [line.split("\t")[:2] for line in out.stdout.splitlines()]
    assert rows[0] == [good, "succeeded"]
    assert sorted(rows[1:]) == [["badjson-0000000a", "corrupt"], ["badv-0000000b", "corrupt"],
                                ["noprompt-0000000c", "corrupt"]]
    problems = {r["id"]: r["problem"] for r in
                json.loads(iterare("list", "--format", "json", cwd=repo).stdout)["runs"]}
    assert problems["badv-0000000b"] == "run.json has unknown format version 9"
    assert problems["noprompt-0000000c"] == "the record tree has no prompt.md"
    assert problems["badjson-0000000a"].startswith("run.json is not valid JSON")
    assert "corrupt" in iterare("list", cwd=repo).stdout
    shown = iterare("show", "badv-0000000b", cwd=repo)
    assert shown.returncode == 1
    assert shown.stderr == ("error: run record badv-0000000b is corrupt: run.json has unknown "
                            "format version 9 (inspect it with `git log -p "
                            "refs/iterare/runs/badv-0000000b`)\n")


def test_show(repo: Path) -> None:
    store = RunStore(repo)
    # The closing words come from the agent that wrote the log (Claude's result event).
    rec = make_run(repo, "fix-bug", prompt_text="Fix it.\nCarefully.\n", created=T0,
                   agent="claude")
    assert rec.base_commit is not None
    work = commit_on_branch(repo, f"iterare/{rec.id}", "a.txt", "one\ntwo\n")
    store.transition(rec.id, "running", started=T0)
    store.set_head(rec.id, work)
    store.set_log(rec.id, b'{"type": "system"}\n{"type": "result", "result": "Fixed."}\n')
    store.transition(rec.id, "succeeded", finished=T1, exit_code=0, cost_usd=1.5,
                     egress={"blocked": ["pypi.org", {"name": "evil.example"}]})
    out = iterare("show", "fix", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"run:       {rec.id}\n"
        "status:    succeeded (exit 0)\n"
        "prompt:    fix-bug (.iterare/prompts/fix-bug.md)\n"
        "agent:     claude\n"
        f"branch:    iterare/{rec.id}\n"
        f"base:      main {rec.base_commit}\n"
        f"head:      {work}\n"
        f"created:   {T0}\n"
        f"started:   {T0}\n"
        f"finished:  {T1}\n"
        "duration:  2m05s\n"
        "cost:      $1.50 (reported by the agent)\n"
        "changes:   1 file +2 -0\n"
        "\n"
        "Prompt:\n"
        "    Fix it.\n"
        "    Carefully.\n"
        "\n"
        "Log: 2 lines\n"
        "    last result (reported by the agent): Fixed.\n"
        "\n"
        f"Changes ({rec.base_commit[:12]}..{work[:12]}):\n"
        "    a.txt | 2 ++\n"
        "    1 file changed, 2 insertions(+)\n"
        "\n"
        "Blocked egress: to allow a name, add its line to allowed_domains under [firewall] "
        "in .iterare/config.toml\n"
        '    evil.example  "evil.example",\n'
        '    pypi.org      "pypi.org",\n')
    assert iterare("show", cwd=repo).stdout == out.stdout  # newest run by default
    assert iterare("show", rec.id[:-2], cwd=repo).stdout == out.stdout


def test_show_of_a_run_that_changed_nothing_says_none(repo: Path) -> None:
    rid = finished_run(repo, "idle", exit_code=0)
    store = RunStore(repo)
    base = store.get(rid).base_commit
    assert base is not None
    store.set_head(rid, base)
    shown = iterare("show", rid, cwd=repo).stdout
    assert f"Changes ({base[:12]}..{base[:12]}): none\n" in shown, shown


def test_show_bad_input(repo: Path) -> None:
    none = iterare("show", cwd=repo)
    assert none.returncode == 1 and none.stderr.startswith("error: there are no runs yet")
    make_run(repo, "twin")
    make_run(repo, "twin")
    ambiguous = iterare("show", "twin", cwd=repo)
    assert ambiguous.returncode == 2 and "'twin' matches 2 runs: twin-" in ambiguous.stderr
    unknown = iterare("show", "zzz", cwd=repo)
    assert (unknown.returncode, unknown.stderr) == (
        1, "error: no run matches 'zzz' (see `git iterare list --all`)\n")


def test_list_reflects_updates_after_cache(repo: Path) -> None:
    rec = make_run(repo, "x")
    assert "\tcreated\t" in iterare("list", "--format", "porcelain", cwd=repo).stdout
    RunStore(repo).transition(rec.id, "running")
    assert "\trunning\t" in iterare("list", "--format", "porcelain", cwd=repo).stdout
    (repo / ".git" / "iterare" / "list-cache.json").write_text("{garbage")
    assert "\trunning\t" in iterare("list", "--format", "porcelain", cwd=repo).stdout
    git("update-ref", "-d", f"refs/iterare/runs/{rec.id}", cwd=repo)
    assert iterare("list", "--format", "porcelain", cwd=repo).stdout == ""
    assert head_of(repo)


def test_many_uncached_records_are_read_in_one_batch(repo: Path) -> None:
    from git_iterare.runs.index import BATCH_THRESHOLD

    made = {make_run(repo, f"r{i}").id for i in range(BATCH_THRESHOLD + 4)}
    corrupt_run(repo, "badjson-0000000a", {b"run.json": b"{nope", b"prompt.md": b""})
    corrupt_run(repo, "badv-0000000b", {b"run.json": b'{"v": 9}', b"prompt.md": b""})
    corrupt_run(repo, "noprompt-0000000c", {b"run.json": b"{}"})
    corrupt_run(repo, "other-0000000d", {b"run.json": json.dumps(
        {"v": 1, "id": "x-00000000", "name": "x", "status": "created"}).encode(),
        b"prompt.md": b""})
    runs = json.loads(iterare("list", "--format", "json", cwd=repo).stdout)["runs"]
    assert {r["id"] for r in runs if r["status"] == "created"} == made
    problems = {r["id"]: r["problem"] for r in runs if r["status"] == "corrupt"}
    assert problems.pop("badjson-0000000a").startswith("run.json is not valid JSON")
    assert problems == {
        "badv-0000000b": "run.json has unknown format version 9",
        "noprompt-0000000c": "the record tree has no prompt.md",
        "other-0000000d": "run.json names another run ('x-00000000')"}
    cached = iterare("list", "--format", "json", cwd=repo).stdout
    assert json.loads(cached)["runs"] == runs


def test_uncached_records_list_the_same_packed_or_loose(repo: Path) -> None:
    from git_iterare.runs.index import BATCH_THRESHOLD

    for i in range(BATCH_THRESHOLD + 2):
        finished_run(repo, f"p{i}")
    cache = repo / ".git" / "iterare" / "list-cache.json"
    loose = iterare("list", "--format", "json", cwd=repo).stdout
    git("gc", "-q", cwd=repo)
    assert not list((repo / ".git" / "objects").glob("??/*"))  # every object packed now
    cache.unlink()
    assert iterare("list", "--format", "json", cwd=repo).stdout == loose


def test_bad_loose_objects_are_left_to_git(tmp_path: Path) -> None:
    import zlib

    from git_iterare.runs.index import LOOSE_MAX_BYTES, _read_loose

    objects = tmp_path / "objects"
    (objects / "ab").mkdir(parents=True)

    def put(name: str, raw: bytes) -> str:
        (objects / "ab" / name).write_bytes(raw)
        return "ab" + name

    good = put("1" * 38, zlib.compress(b"blob 3\0abc"))
    assert _read_loose(str(objects), good) == (b"blob", b"abc")
    assert _read_loose(str(objects), "ab" + "9" * 38) is None  # not loose here
    assert _read_loose(str(objects), put("2" * 38, zlib.compress(b"blob 9\0abc"))) is None
    assert _read_loose(str(objects), put("3" * 38, b"not zlib")) is None
    assert _read_loose(str(objects), put("4" * 38, zlib.compress(b"blob 3\0abc")[:-4])) is None
    huge = zlib.compress(b"blob %d\0" % (LOOSE_MAX_BYTES * 4) + bytes(LOOSE_MAX_BYTES * 4))
    assert len(huge) < LOOSE_MAX_BYTES  # a small file that inflates past the bound
    assert _read_loose(str(objects), put("5" * 38, huge)) is None
    assert _read_loose(str(objects), put("6" * 38, zlib.compress(b"evil 3\0abc"))) is None


def test_log_of_a_run_ended_from_outside_says_how_it_ended(repo: Path) -> None:
    """A timed-out or stopped run's log ends with that, not with the agent's "failed"
    (the agent was killed); ``list`` and ``show`` name the same status."""
    store = RunStore(repo)
    ended = {"timed-out": ("timed out", 124, "killed after the 3 s timeout"),
             "stopped": ("stopped", 143, "stopped by the user"),
             "failed": ("failed", 1, None)}
    for status, (closing, code, error) in ended.items():
        rid = finished_run(repo, status.replace("-", ""), status, exit_code=code, error=error)
        store.append_log(rid, b"start\n")
        # As git log: exit 0 whatever the run's status; --exit-status (gh run watch's)
        # exits 1 for a run that did not succeed.
        shown = iterare("log", rid, cwd=repo)
        assert (shown.returncode, shown.stdout) == (0, f"start\n{closing}\n"), shown.stderr
        checked = iterare("log", "--exit-status", rid, cwd=repo)
        assert (checked.returncode, checked.stdout) == (1, f"start\n{closing}\n")
        assert f"status:    {status} (exit {code})\n" in iterare("show", rid, cwd=repo).stdout
        listed = iterare("list", "--format", "porcelain", cwd=repo).stdout.splitlines()
        assert [rid, status] in [line.split("\t")[:2] for line in listed]
