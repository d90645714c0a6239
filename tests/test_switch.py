"""Switching from iterare (iterare-llm 0.2.3) with no edit: its scaffold, flags, mounts,
credentials and runs (issue 10). The predecessor itself runs here (see
tests/legacy_iterare.py); the sandbox tests use the real sandbox on the local internet."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.sandbox.image import is_legacy_image, legacy_dockerfile
from git_iterare.sandbox.networks import compose_network, normalize_project_name
from tests.conftest import git, iterare
from tests.legacy_iterare import Legacy, init_project
from tests.sandbox_fixtures import NET


def commit_all(repo: Path, message: str) -> None:
    git("add", "-A", cwd=repo)
    git("commit", "-qm", message, cwd=repo)


def user_config(text: str) -> None:
    """The user's own (trusted) global config.toml."""
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "iterare" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- item 1: iterare's image and scaffold ---------------------------------------------------

@pytest.mark.parametrize("name, legacy", [
    ("sohonet/iterare-llm", True), ("sohonet/iterare-llm:latest", True),
    ("docker.io/sohonet/iterare-llm:0.2.3", True), ("SOHONET/iterare-llm:latest", True),
    ("sohonet/iterare-llm-extra:latest", False), ("evil/sohonet/iterare-llm", False),
    ("git-iterare:latest", False), ("iterare-llm:latest", False)])
def test_legacy_image_names(name: str, legacy: bool) -> None:
    assert is_legacy_image(name) is legacy


def test_legacy_dockerfile_rewritten_from_own_image() -> None:
    found = legacy_dockerfile("FROM sohonet/iterare-llm:latest AS base\nRUN make\n", "own:1")
    assert found is not None
    assert (found.text, found.names_only, found.legacy) == (
        "FROM own:1 AS base\nRUN make\n", False, "sohonet/iterare-llm:latest")
    assert legacy_dockerfile("FROM debian\n", "own:1") is None


def test_iterare_init_needs_no_trust_and_init_offers_rewrite(
        repo: Path, legacy: Legacy | None) -> None:
    init_project(legacy, repo)
    assert (repo / ".iterare" / "Dockerfile").read_text().startswith(
        "FROM sohonet/iterare-llm:latest\n")
    commit_all(repo, "iterare init")
    found = legacy_dockerfile((repo / ".iterare" / "Dockerfile").read_text(), "x")
    assert found is not None and found.names_only
    trust = iterare("trust", cwd=repo)
    assert trust.returncode == 0, trust.stderr
    assert "asks for nothing beyond the defaults" in trust.stdout
    # Without a terminal, init says how runs use the file and keeps it.
    again = iterare("init", cwd=repo)
    assert again.returncode == 0, again.stderr
    dockerfile = repo / ".iterare" / "Dockerfile"
    assert again.stdout.splitlines()[-2] == (
        f"note: {dockerfile} builds on iterare's image sohonet/iterare-llm:latest; runs use "
        "git-iterare:latest instead (run `git iterare init` at a terminal to rewrite it)")
    assert dockerfile.read_text().startswith("FROM sohonet/iterare-llm:latest\n")
    # At a terminal, it offers the rewrite; yes writes git-iterare's scaffold.
    from tests.terminal import in_terminal

    code, out = in_terminal(["git", "iterare", "init"], repo, b"y\n", b"[Y/n]")
    assert code == 0, out
    assert b"rewritten" in out
    from git_iterare.scaffold import DOCKERFILE

    assert dockerfile.read_text() == DOCKERFILE.format(image="git-iterare:latest")


def test_legacy_image_in_project_config_asks_nothing(repo: Path) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "config.toml").write_text(
        '[docker]\nimage = "sohonet/iterare-llm:latest"\n')
    trust = iterare("trust", cwd=repo)
    assert "asks for nothing beyond the defaults" in trust.stdout, trust.stdout


def _uncomment_iterare_example(repo: Path) -> None:
    """What a user of iterare does with its ``init``'s config: uncomment the example
    ``[firewall] allowed_domains`` it offers."""
    config = repo / ".iterare" / "config.toml"
    text = config.read_text()
    example = '# [firewall]\n# allowed_domains = ["pypi.org", "files.pythonhosted.org"]\n'
    assert example in text
    config.write_text(text.replace(example, example.replace("# ", "")))


def test_iterare_example_config_is_approved_at_the_terminal(
        repo: Path, legacy: Legacy | None, hermetic_env: Path) -> None:
    from tests.terminal import in_terminal

    init_project(legacy, repo)
    _uncomment_iterare_example(repo)
    (repo / ".iterare" / "prompts" / "t.md").write_text("---\nagent: shell\n---\necho hi\n")
    commit_all(repo, "iterare init, its example allowlist")
    no_engine = {"DOCKER_HOST": "unix:///nonexistent.sock"}
    refusal = ("error: this repository asks for settings you have not approved "
               "(firewall.allowed_domains); review them with `git iterare trust`")
    # Without a terminal: the one-line refusal.
    done = iterare("execute", "t", cwd=repo, env=no_engine)
    assert (done.returncode, done.stderr) == (2, refusal + "\n")
    # On a terminal: what is asked, and the question; Enter (no, the default) refuses alike.
    argv = ["env", "NO_COLOR=1", "DOCKER_HOST=unix:///nonexistent.sock",
            "git", "iterare", "execute", "t"]
    code, out = in_terminal(argv, repo, b"\r", b"[y/N] ")
    lines = out.decode().replace("\r\n", "\n").splitlines()
    assert code == 2, out
    assert lines == [
        f"repository: {repo}",
        "asks for (from .iterare/config.toml, Dockerfile, include, prompts and agent settings):",
        '  firewall.allowed_domains = ["pypi.org", "files.pythonhosted.org"]',
        "not approved yet",
        "Approve this for the repository and go on? [y/N] ",
        refusal]
    assert git("for-each-ref", "refs/iterare/", cwd=repo).stdout == ""
    # y approves it there, and the run goes on (to the engine, absent here).
    code, out = in_terminal(argv, repo, b"y\r", b"[y/N] ")
    assert code == 1, out
    assert out.decode().rstrip().endswith("error: cannot reach the Docker engine at "
                                          "unix:///nonexistent.sock (is dockerd running?)")
    trust = iterare("trust", "--show", cwd=repo)
    assert "all of it is approved" in trust.stdout, trust.stdout


def test_a_read_write_mount_the_agent_cannot_write_is_named(repo: Path) -> None:
    """iterare's template mount, ``./data:/workspace/data:rw``: the agent's uid is no host
    account's, so only the bits for others let it write; a folder that does not says so."""
    data = repo / "data"
    data.mkdir()
    data.chmod(0o755)
    user_config('[mounts]\nvolumes = ["./data:/workspace/data:rw", "./open:/workspace/open"]\n')
    (repo / "open").mkdir()
    (repo / "open").chmod(0o777)
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "t.md").write_text("---\nagent: shell\n---\necho hi\n")
    commit_all(repo, "prompt")
    done = iterare("execute", "t", cwd=repo, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"warning: mounts.volumes entry './data:/workspace/data:rw': the agent cannot write "
        f"in {data} (yours, mode 0755): it runs as a uid of its own, which owns nothing "
        f"there; mount it :ro, or let every user write there (chmod o+wx {data})",
        "error: cannot reach the Docker engine at unix:///nonexistent.sock (is dockerd "
        "running?)"]
    user_config('[mounts]\nvolumes = ["./data:/workspace/data:ro"]\n')
    done = iterare("execute", "t", cwd=repo, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert "warning" not in done.stderr


# -- item 2: flags, compose networks --------------------------------------------------------

def test_compose_network_name(tmp_path: Path) -> None:
    project = tmp_path / "My_Project.v2"
    project.mkdir()
    assert compose_network(project, {}) is None  # no compose file
    (project / "docker-compose.yml").write_text("services:\n  db:\n    image: x\n")
    assert compose_network(project, {}) == "my_projectv2_default"
    (project / "docker-compose.yml").write_text("name: From-File\nservices: {}\n")
    assert compose_network(project, {}) == "from-file_default"
    (project / ".env").write_text("# x\nCOMPOSE_PROJECT_NAME='Dot_Env'\n")
    assert compose_network(project, {}) == "dot_env_default"
    assert compose_network(project, {"COMPOSE_PROJECT_NAME": "Shell"}) == "shell_default"
    assert normalize_project_name("__a b.C-d") == "abc-d"


def test_predecessor_flags_accepted(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = iterare("-v", "list", "-p", str(repo), "--format", "porcelain", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    # -v before the command is --verbose; -p names the repository from elsewhere.
    assert re.search(rf"^\+ git rev-parse .*--show-toplevel \(in {re.escape(str(repo))}\)$",
                     listed.stderr, re.M)
    assert iterare("init", "-f", str(repo), cwd=elsewhere).returncode == 0
    for args in (["execute", "-h"], ["interactive", "-h"]):
        usage = iterare(*args, cwd=repo).stdout
        for flag in ("--docker-network", "--docker-compose", "--project"):
            assert flag in usage, (args, flag)
    # Refused networks stay refused, from flags too (the engine is never asked).
    refused = iterare("execute", "example", "--dn", "host", cwd=repo)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: --docker-network host: network 'host' is refused")
    refused = iterare("execute", "example", "--docker-network", "container:abc", cwd=repo)
    assert refused.returncode == 2 and "is refused" in refused.stderr
    missing = iterare("list", "-p", str(tmp_path / "nope"), cwd=repo)
    assert (missing.returncode, missing.stderr) == (
        2, f"error: --project {tmp_path / 'nope'}: no such directory\n")
    (tmp_path / "afile").write_text("")
    a_file = iterare("list", "-p", str(tmp_path / "afile"), cwd=repo)
    assert (a_file.returncode, a_file.stderr) == (
        2, f"error: Invalid value for '--project' / '-p': Directory '{tmp_path / 'afile'}' "
           "is a file. (see 'git iterare list -h')\n")


# -- item 6: runs brought over with import-legacy -------------------------------------------

def test_imported_runs_work_with_every_command(repo: Path, legacy: Legacy | None) -> None:
    if legacy is None:
        pytest.skip("no Python 3.13 for iterare-llm 0.2.3 (see tests/data/legacy/README.md)")
    init_project(legacy, repo)
    commit_all(repo, "iterare init")
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    made = legacy.make_run(repo, "fix-docs")
    rid, worktree = made["run"], Path(made["worktree"])
    assert worktree == repo / "workspaces" / rid
    (worktree / "DOCS.md").write_text("docs\n")
    git("add", "DOCS.md", cwd=worktree)
    git("commit", "-qm", "docs", cwd=worktree)
    # Meanwhile main moves on: the base must still be where iterare branched.
    (repo / "other.txt").write_text("x\n")
    commit_all(repo, "other")

    imported = iterare("import-legacy", cwd=repo)
    assert imported.returncode == 0, imported.stderr
    assert f"created  {rid} -> {rid} (succeeded)" in imported.stdout
    rec = json.loads(git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
    assert (rec["base_commit"], rec["base_branch"], rec["branch"]) == (base, "main", rid)
    assert rec["changes"] == {"files": 1, "insertions": 1, "deletions": 0}

    diff = iterare("diff", rid, "--stat", cwd=repo)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines()[-1] == " 1 file changed, 1 insertion(+)"
    # iterare's log is imported and rendered (its own `iterare log` renders it too).
    theirs = legacy.run("log", rid, cwd=repo)
    ours = iterare("log", rid, cwd=repo)
    assert (ours.returncode, ours.stderr) == (0, "")
    assert "I will create the file." in theirs.stdout and "I will create the file." in ours.stdout
    assert "Log: 0 lines" not in iterare("show", rid, cwd=repo).stdout

    # Later commits on iterare's branch are followed.
    (worktree / "MORE.md").write_text("more\n")
    git("add", "MORE.md", cwd=worktree)
    git("commit", "-qm", "more", cwd=worktree)
    tip = git("rev-parse", "HEAD", cwd=worktree).stdout.strip()
    assert iterare("diff", rid, "--name-only", cwd=repo).stdout == "DOCS.md\nMORE.md\n"
    rec = json.loads(git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
    assert rec["head"] == tip

    # iterare's own .claude-auto-config.json and .claude-prompt.md are in the worktree,
    # untracked: they are no work that cleanup would lose; the unmerged branch is.
    assert git("status", "--porcelain", cwd=worktree).stdout == (
        "?? .claude-auto-config.json\n?? .claude-prompt.md\n")
    refused = iterare("cleanup", "-y", rid, cwd=repo)
    assert (refused.returncode, refused.stderr) == (
        1, f"error: run {rid} has work that would be lost: branch {rid} is not merged into "
           f"any local branch (`git iterare merge {rid}` first, or "
           f"`git iterare cleanup --force {rid}`)\n")
    assert worktree.is_dir()
    merged = iterare("merge", "-y", rid, cwd=repo)
    assert merged.returncode == 0, merged.stderr
    assert (repo / "MORE.md").is_file()
    cleaned = iterare("cleanup", "-y", rid, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not worktree.exists()
    assert git("branch", "--list", rid, cwd=repo).stdout == ""
    assert rid not in git("worktree", "list", cwd=repo).stdout


def _stream(tmp_path: Path, name: str, last: dict[str, object] | None) -> Path:
    """The recorded Claude Code stream with its final result event changed by ``last``
    (None: without one, as when the container was killed)."""
    from tests.legacy_iterare import CLAUDE_STREAM

    lines = CLAUDE_STREAM.read_text().splitlines()
    result = json.loads(lines[-1])
    assert result["type"] == "result"
    lines = lines[:-1] + ([json.dumps({**result, **last})] if last is not None else [])
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_imported_runs_tell_how_they_ended(repo: Path, legacy: Legacy | None,
                                           tmp_path: Path) -> None:
    if legacy is None:
        pytest.skip("no Python 3.13 for iterare-llm 0.2.3 (see tests/data/legacy/README.md)")
    init_project(legacy, repo)
    (repo / ".iterare" / "prompts" / "docs.md").write_text(
        "---\nworkspace: docs\n---\nWrite the docs.\n")
    commit_all(repo, "iterare init")
    done = legacy.make_run(repo, "docs")["run"]
    failed = legacy.make_run(repo, "docs", stream=_stream(tmp_path, "failed.log", {
        "subtype": "error_max_turns", "is_error": True, "result": "Ran out of turns.",
        "total_cost_usd": 1.25}))["run"]
    cut = legacy.make_run(repo, "docs", stream=_stream(tmp_path, "cut.log", None))["run"]
    imported = iterare("import-legacy", cwd=repo)
    assert imported.returncode == 0, imported.stderr
    assert sorted(imported.stdout.splitlines()[:3]) == sorted([
        f"created  {done} -> {done} (succeeded)", f"created  {failed} -> {failed} (failed)",
        f"created  {cut} -> {cut} (lost)"])
    listed = {line.split("\t")[0]: line.split("\t") for line in iterare(
        "list", "--format", "porcelain", cwd=repo).stdout.splitlines()}
    reported = json.loads(_stream(tmp_path, "ok.log", {}).read_text().splitlines()[-1])
    assert (listed[done][1], listed[done][5]) == (
        "succeeded", str(reported["total_cost_usd"]))
    assert (listed[failed][1], listed[failed][5]) == ("failed", "1.25")
    assert (listed[cut][1], listed[cut][5]) == ("lost", "-")
    assert "error:     Ran out of turns." in iterare("show", failed, cwd=repo).stdout
    # The prompt text iterare gave Claude Code, from its .claude-prompt.md.
    shown = iterare("show", done, cwd=repo).stdout
    assert shown.split("Prompt:\n", 1)[1].split("\n\n", 1)[0] == "    Write the docs."


def test_an_earlier_import_of_a_lost_run_is_given_its_outcome(repo: Path) -> None:
    from tests.legacy_iterare import CLAUDE_STREAM
    from tests.test_cli_import_legacy import legacy_file

    rid = "fix-api-abc12345"
    git("worktree", "add", "-q", "-b", rid, str(repo / "workspaces" / rid), "main", cwd=repo)
    path = legacy_file(repo)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({rid: {"prompt_name": "fix-api", "timestamp": 1767225600.5,
                                      "project_dir": str(repo)}}))
    assert iterare("import-legacy", cwd=repo).returncode == 0  # no log yet: lost
    # What an import before outcomes were read left: a lost record holding the log.
    from git_iterare.runs.store import RunStore

    RunStore(repo).set_log(rid, CLAUDE_STREAM.read_bytes())
    again = iterare("import-legacy", cwd=repo)
    assert again.stdout.splitlines()[0] == f"exists   {rid} -> {rid} (succeeded)"
    rec = json.loads(git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
    assert (rec["status"], rec["finished"], rec["turns"]) == ("succeeded", None, 2)


def test_imported_run_without_known_base(repo: Path, legacy: Legacy | None) -> None:
    if legacy is None:
        pytest.skip("no Python 3.13 for iterare-llm 0.2.3 (see tests/data/legacy/README.md)")
    made = legacy.make_run(repo, "orphan")
    rid = made["run"]
    # An orphan history: no reflog and no merge base with HEAD.
    worktree = Path(made["worktree"])
    git("checkout", "-q", "--orphan", "tmp", cwd=worktree)
    git("commit", "-qm", "orphan", cwd=worktree)
    git("branch", "-f", rid, "tmp", cwd=worktree)
    git("checkout", "-q", rid, cwd=worktree)
    git("branch", "-D", "tmp", cwd=worktree)
    git("reflog", "expire", "--expire=all", "--all", cwd=repo)
    (repo / ".git" / "logs" / "refs" / "heads" / rid).unlink(missing_ok=True)
    assert iterare("import-legacy", cwd=repo).returncode == 0
    diff = iterare("diff", rid, cwd=repo)
    assert (diff.returncode, diff.stderr) == (1, (
        f"error: run {rid} has no known base commit (it was imported from iterare and its "
        f"branch's start was not found) (diff its branch yourself: git diff {rid})\n"))
    merged = iterare("merge", "-y", rid, cwd=repo)
    assert merged.returncode == 1 and "has no known base commit" in merged.stderr


# -- the real sandbox -------------------------------------------------------------------------

@pytest.fixture
def sandbox_user(sandbox_image: str, test_network: str) -> Iterator[None]:
    """The user's own config: the test image, the local internet and its resolver."""
    user_config(f'[docker]\nimage = "{sandbox_image}"\nnetwork = "{test_network}"\n'
                f'dns = ["{NET["DNS_V4"]}"]\ncpus = 1\nmemory = "1g"\n'
                f'[run]\nagent = "shell"\n[mounts]\nvolumes = ["./data:/workspace/data:rw"]\n')
    yield


def _remove_containers(repo: Path) -> None:
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                         capture_output=True, text=True, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


@pytest.mark.docker
def test_iterare_project_runs_unchanged(repo: Path, legacy: Legacy | None,
                                        sandbox_user: None) -> None:
    """iterare's init, its template's mount, `workspace: 123` and 0644 credentials: a run
    with no edit and no trust step (items 1, 3, 4, 5)."""
    init_project(legacy, repo)
    (repo / ".gitignore").write_text((repo / ".gitignore").read_text() + "data/\n")
    (repo / ".iterare" / "prompts" / "numbered.md").write_text(
        "---\nworkspace: 123\nagent: shell\n---\n"
        "set -e\necho from-the-agent > data/out.txt\necho work > work.txt\n"
        "git add -A && git commit -qm work\nls data\necho done-here\n")
    commit_all(repo, "iterare init")
    (repo / "data").mkdir()
    (repo / "data" / "input.txt").write_text("input\n")
    # The agent's uid is no host account's: a writable mount must let others write.
    (repo / "data").chmod(0o777)
    key = Path(os.environ["XDG_CONFIG_HOME"]) / "iterare" / "anthropic-api-key"
    key.write_text("sk-ant-api03-unused\n")
    key.chmod(0o644)
    try:
        started = iterare("execute", "numbered", "--follow", cwd=repo)
        assert started.returncode == 0, started.stdout + started.stderr
        rid = started.stdout.split()[2]
        assert rid.startswith("123-")
        assert "input.txt\nout.txt\ndone-here\n" in started.stdout
        assert "only names iterare's image sohonet/iterare-llm:latest" in started.stderr
        # The mount's content is the host folder's, never the agent's work.
        assert (repo / "data" / "out.txt").read_text() == "from-the-agent\n"
        files = git("ls-tree", "-r", "--name-only", f"iterare/{rid}", cwd=repo).stdout
        assert "work.txt" in files.split() and "data" not in files
    finally:
        _remove_containers(repo)


COMPOSE = """\
version: "2.4"
services:
  db:
    image: itr-sandbox-testnet:1
    command: serve db
"""

REACH = """\
addr=$(cat db-address)
curl -s -m 5 "http://$addr/" && echo reached-db
curl -s -m 5 http://db/ && echo reached-db-by-name
curl -s -m 5 http://blocked.test/ && echo reached-blocked || echo blocked-stays-blocked
getent hosts blocked.test || echo blocked-name-unresolved
"""


@pytest.mark.docker
def test_docker_compose_network_reached(repo: Path, sandbox_user: None) -> None:
    """--docker-compose: the agent reaches the compose project's service; other names
    stay blocked; show lists the network's subnet (item 2)."""
    project = f"itrswitch{os.getpid()}"
    (repo / "docker-compose.yml").write_text(COMPOSE)
    (repo / ".env").write_text(f"COMPOSE_PROJECT_NAME={project}\n")
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    (repo / ".iterare" / "prompts" / "reach.md").write_text(
        "---\nagent: shell\n---\n" + REACH)
    up = subprocess.run(["docker-compose", "up", "-d"], cwd=repo, capture_output=True,
                        text=True, check=False)
    try:
        assert up.returncode == 0, up.stderr
        network = f"{project}_default"
        inspect = json.loads(subprocess.run(
            ["docker", "inspect", f"{project}_db_1"], capture_output=True, text=True,
            check=True).stdout)[0]
        address = inspect["NetworkSettings"]["Networks"][network]["IPAddress"]
        subnet = json.loads(subprocess.run(
            ["docker", "network", "inspect", network], capture_output=True, text=True,
            check=True).stdout)[0]["IPAM"]["Config"][0]["Subnet"]
        (repo / "db-address").write_text(address + "\n")
        (repo / "data").mkdir()  # the user's [mounts] (see sandbox_user)
        commit_all(repo, "compose project")
        started = iterare("execute", "reach", "--dc", "--follow", cwd=repo)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "db:80\nreached-db\n" in started.stdout
        # The service's name resolves (Docker's DNS, asked for the network's names only).
        assert "db:80\nreached-db-by-name\n" in started.stdout
        assert "blocked-stays-blocked" in started.stdout
        assert "blocked-name-unresolved" in started.stdout
        rid = started.stdout.split()[2]
        rec = json.loads(git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
        assert subnet in rec["policy"]["networks"]
        assert rec["extra"]["networks"] == [network]
        assert subnet in iterare("show", rid, cwd=repo).stdout
        assert "db" in rec["policy"]["local"]
        # Without the flag the service is out of reach.
        closed = iterare("execute", "reach", "--follow", cwd=repo)
        assert "reached-db" not in closed.stdout
    finally:
        _remove_containers(repo)
        subprocess.run(["docker-compose", "down", "-v"], cwd=repo, capture_output=True,
                       check=False)


@pytest.mark.docker
def test_missing_session_shell_falls_back_to_bash(repo: Path, sandbox_user: None) -> None:
    """iterare's `[session] shell = "/bin/zsh"`, which the image lacks: bash starts with one
    warning naming the key (item 7)."""
    from tests.terminal import in_terminal

    (repo / "data").mkdir()
    user_config(Path(os.environ["XDG_CONFIG_HOME"], "iterare", "config.toml").read_text()
                + '[session]\nshell = "/bin/zsh"\n')
    try:
        code, out = in_terminal(["git", "iterare", "interactive", "--worktree", "--shell"],
                                repo, b"echo shell-is-$0; exit 3\n",
                                b"starting bash instead", timeout=120)
        text = out.decode("utf-8", "replace")
        assert "warning: session.shell /bin/zsh is not in the sandbox image; starting bash " \
               "instead" in text
        assert "shell-is-bash" in text
        assert code == 3, text
    finally:
        _remove_containers(repo)
