"""``execute -n N`` end to end with the shell agent in the real sandbox: attempts that
differ (the script branches on ITERARE_ATTEMPT), ``compare`` ranking them, ``merge GROUP``
merging the best, ``cleanup GROUP --force`` removing the rest, and a queue that starts the
waiting attempts after the command returned."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record
from tests.test_runs_e2e import project  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker

#: Attempt 1 fails, 2 writes ten lines, 3 writes one: the ranking is 3, 2, 1.
DIFFERING = """\
case "$ITERARE_ATTEMPT" in
  1) echo broken > out.txt; exit 1 ;;
  2) seq 10 > out.txt ;;
  3) echo "attempt $ITERARE_ATTEMPT" > out.txt ;;
esac
"""


def group_of(output: str) -> str:
    match = re.search(r"^group (\S+):( |$)", output, re.M)
    assert match, output
    return match.group(1)


def test_best_of_three_compared_merged_and_the_rest_cleaned(project: Path) -> None:  # noqa: F811
    prompt(project, "task", DIFFERING)
    out = iterare("execute", "task", "-n", "3", "--jobs", "3", "-f", cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    group = group_of(out.stdout)
    ended = sorted(line for line in out.stdout.splitlines() if re.match(r"attempt \d/3: ", line))
    assert [re.sub(r"run \S+ ", "run ID ", line).split(" (")[0] for line in ended] == [
        "attempt 1/3: run ID failed", "attempt 2/3: run ID succeeded",
        "attempt 3/3: run ID succeeded"]
    assert out.stdout.splitlines()[-1] == (f"group {group}: 2 of 3 attempts succeeded; "
                                           f"compare them with `git iterare compare {group}`")

    doc = json.loads(iterare("compare", group, "--format", "json", cwd=project).stdout)
    runs = {a["attempt"]: a["run"] for a in doc["attempts"]}
    assert [(a["attempt"], a["status"], a["lines"]) for a in doc["attempts"]] == [
        (3, "succeeded", 1), (2, "succeeded", 10), (1, "failed", 1)]
    for k, run in runs.items():
        data = record(project, run)
        assert (data["extra"]["group"], data["extra"]["attempt"]) == (group, k)
        assert data["base_commit"] == git("rev-parse", "main", cwd=project).stdout.strip()
        note = git("notes", "--ref=iterare", "show", data["head"], cwd=project).stdout
        assert json.loads(note)["group"] == group
    table = iterare("compare", group, cwd=project).stdout.splitlines()
    assert [line.split()[:3] for line in table[2:5]] == [
        ["3", runs[3], "succeeded"], ["2", runs[2], "succeeded"], ["1", runs[1], "failed"]]

    between = iterare("diff", runs[3], runs[2], "--stat", cwd=project)
    assert between.returncode == 0 and "out.txt" in between.stdout, between.stderr

    merged = iterare("merge", group, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert f"the best attempt of group {group}: {runs[3]}" in merged.stderr
    assert (project / "out.txt").read_text() == "attempt 3\n"

    refused = iterare("cleanup", group, "--yes", cwd=project)
    assert refused.returncode == 1 and "would be lost" in refused.stderr
    cleaned = iterare("cleanup", group, "--yes", "--force", cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"keeping {runs[3]}, merged from group {group}" in cleaned.stderr
    assert {k: record(project, run)["status"] for k, run in runs.items()} == {
        1: "cleaned", 2: "cleaned", 3: "merged"}


def test_queued_attempts_start_after_the_command_returned(project: Path) -> None:  # noqa: F811
    prompt(project, "slow", 'sleep 4\necho "$ITERARE_ATTEMPT" > n.txt\n')
    started = time.monotonic()
    out = iterare("execute", "slow", "-n", "3", "--jobs", "1", cwd=project)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 30  # it did not wait for the attempts
    group = group_of(out.stdout)
    assert "2 attempts queued" in out.stdout
    listed = iterare("list", cwd=project).stdout
    assert re.findall(rf"^{re.escape(group)}  queued  attempt (\d)/3", listed, re.M) == [
        "2", "3"], listed
    deadline = time.monotonic() + 180
    while True:
        doc = json.loads(iterare("compare", group, "--format", "json", cwd=project).stdout)
        statuses = sorted((a["attempt"], a["status"]) for a in doc["attempts"])
        if statuses == [(1, "succeeded"), (2, "succeeded"), (3, "succeeded")]:
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(1)
    for a in doc["attempts"]:
        assert git("show", f"iterare/{a['run']}:n.txt", cwd=project).stdout == \
            f"{a['attempt']}\n"
    assert "queued" not in iterare("list", cwd=project).stdout
