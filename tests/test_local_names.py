"""Names of containers on attached networks resolve in the sandbox (compose's ``db``),
but never one that would shadow an allowlisted or public name: an alias
``api.anthropic.com`` set by a repository's compose file would otherwise take the agent's
requests, its API key included, to that container (found by an adversarial test)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from git_iterare.sandbox.networks import split_local_names
from tests.conftest import git, iterare
from tests.runs_helpers import record, run_id
from tests.sandbox_fixtures import NET

ALLOWED = ("api.anthropic.com", "*.wild.example", "ported.example:8443", "statsig.com")


@pytest.mark.parametrize(("name", "kept"), [
    ("db", True), ("myproj-db-1", True), ("redis_cache", True),
    ("db.local", True), ("api.internal", True), ("x.test", True), ("a.localhost", True),
    ("nas.lan", True), ("printer.home.arpa", True), ("db.x1", True),
    ("api.anthropic.com", False),  # an allowlisted name
    ("eu.api.anthropic.com", False),  # below one
    ("anthropic.com", False), ("com", False),  # above one (a single label too)
    ("wild.example", False), ("a.wild.example", False),  # a *. entry, by its name
    ("ported.example", False),  # a name:port entry
    ("example", False),
    ("evil.org", False), ("api.openai.com", False), ("x.xn--p1ai", False),  # public shape
    ("org", True),  # a single label above no allowlisted name
])
def test_split_local_names(name: str, kept: bool) -> None:
    assert split_local_names([name], ALLOWED) == (((name,), ()) if kept else ((), (name,)))


def test_split_keeps_order_and_drops_duplicates() -> None:
    assert split_local_names(["db", "API.anthropic.com", "db", "cache", "evil.org."],
                             ALLOWED) == (("db", "cache"), ("api.anthropic.com", "evil.org"))


@pytest.mark.docker
def test_a_shadowing_alias_does_not_resolve(repo: Path, sandbox_image: str,
                                            test_network: str) -> None:
    """A container on an attached network answering to ``db``, to an allowlisted name and
    to ``api.anthropic.com``: only ``db`` reaches it; the allowlisted name reaches its real
    server, and the public-shaped name does not resolve."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "iterare" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[docker]\nimage = "{sandbox_image}"\nnetwork = "{test_network}"\n'
                      f'dns = ["{NET["DNS_V4"]}"]\ncpus = 1\nmemory = "1g"\n'
                      '[run]\nagent = "shell"\n[firewall]\nallowed_domains = ["allowed.test"]\n')
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    (repo / ".iterare" / "prompts" / "names.md").write_text(
        "---\nagent: shell\n---\n"
        "echo \"db: $(curl -s -m 5 http://db/)\"\n"
        "echo \"allowed: $(curl -s -m 5 http://allowed.test/)\"\n"
        "getent hosts api.anthropic.com || echo anthropic-unresolved\n"
        "getent hosts exfil-31337.db || echo db-subdomain-unresolved\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "prompt", cwd=repo)
    network = f"itrnames{os.getpid()}"
    shadow = f"{network}-shadow"
    subprocess.run(["docker", "network", "create", network], capture_output=True, check=True)
    try:
        subprocess.run(["docker", "run", "-d", "--name", shadow, "--network", network,
                        "--network-alias", "db", "--network-alias", "allowed.test",
                        "--network-alias", "api.anthropic.com", "itr-sandbox-testnet:1",
                        "serve", "shadow"], capture_output=True, check=True)
        started = iterare("execute", "names", "--docker-network", network, "--follow",
                          cwd=repo)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "db: shadow:80\n" in started.stdout
        assert "allowed: allowed:80\n" in started.stdout
        assert "anthropic-unresolved\n" in started.stdout
        # A local name stands for itself alone: its subdomains are answered in the
        # sandbox, never sent on to Docker's server (which would ask the internet).
        assert "db-subdomain-unresolved\n" in started.stdout
        # The egress report (the resolver's log is deleted once it is read): answered
        # in the sandbox, so blocked, never forwarded.
        egress = record(repo, run_id(started.stdout))["egress"]
        assert "exfil-31337.db" in egress["blocked"], egress
        assert "exfil-31337.db" not in egress["allowed"], egress
        assert ("warning: names of containers on the attached networks that look like "
                "public or allowlisted names do not resolve in the sandbox: allowed.test, "
                "api.anthropic.com (use their addresses, or single-label names such as "
                "db)\n") in started.stderr
    finally:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter",
                              f"label=dev.iterare.repo={repo}"],
                             capture_output=True, text=True, check=False).stdout.split()
        subprocess.run(["docker", "rm", "-f", shadow, *ids], capture_output=True, check=False)
        subprocess.run(["docker", "network", "rm", network], capture_output=True, check=False)
