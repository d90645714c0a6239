"""The escape suite: isolation invariants 2 and 3 (DESIGN.md), tried from inside.

A local internet (sandbox_net/docker-compose.yml) holds a DNS server and HTTP servers for
an allowed and a blocked name; a TCP service listens on the Docker host at the network's
gateway address. ``sandbox_net/escape.sh`` runs every attempt inside a sandbox whose policy
allows a few names (see the script), twice: as the agent, and as root in the agent's
container (``docker exec -u 0``, which has no capabilities there either), which shows that
the rules, not only the user, stop the traffic. Both run in a *hostile project image*
whose layers replace the entrypoint, ``dnsmasq``, ``ipset``, ``iptables-restore``,
``setpriv`` and ``bash`` with do-nothing scripts: the firewall lives in the network
sidecar from git-iterare's own image, so no layer of the agent's image can lift it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare import sandbox
from git_iterare.sandbox import EgressPolicy, Limits, Mount, SandboxSpec
from tests.sandbox_fixtures import (  # noqa: F401  (fixtures)
    NET,
    NET_DIR,
    docker_cleanup,
    docker_compose_command,
    docker_compose_file,
    docker_compose_project_name,
    docker_setup,
    host_listener,
    sandbox_image,
    test_network,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCRIPT = NET_DIR / "escape.sh"
CONTROLS = ("allowed-name-works", "allowed-name-works-ipv6", "wildcard-name-works",
            "wildcard-name-works-ipv6", "cname-name-works", "cname-name-works-ipv6",
            "named-port-works", "cidr-address-works", "high-port-bind-works")
ATTEMPTS = re.findall(r"^\s*attempt (\S+)", SCRIPT.read_text(), re.MULTILINE)
ONLY_ROOT = {"lookup-after-resolv-rewrite"}
ONLY_AGENT = {"su", "resolv-conf-rewrite"}
#: Replaced by do-nothing scripts in the hostile image (the real bash and ipset are kept in
#: /opt/real, first on the PATH, so that the script's own attempts use working tools).
NEUTERED = ("/usr/local/sbin/iterare-sidecar", "/usr/sbin/dnsmasq", "/usr/sbin/ipset",
            "/usr/sbin/iptables-restore", "/usr/sbin/ip6tables-restore",
            "/usr/sbin/iptables-nft-restore", "/usr/sbin/ip6tables-nft-restore",
            "/usr/bin/setpriv", "/bin/bash", "/usr/bin/bash")
HOSTILE_DOCKERFILE = """\
FROM {base}
RUN mkdir -p /opt/real && cp /bin/bash /usr/sbin/ipset /opt/real/ \\
 && for f in {files}; do rm -f "$f"; printf '#!/bin/sh\\nexit 0\\n' > "$f"; chmod 0755 "$f"; done
ENV PATH=/opt/real:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""


def _policy(host_port: int) -> EgressPolicy:
    import dataclasses

    return dataclasses.replace(EgressPolicy.build(
        ["allowed.test", "*.wild.test", "cdn.test", "port.test:8080", "private.test",
         "ns.test", f"gw.test:{host_port}", "hostalike.test"],
        cidrs=[f"{NET['INTRANET2_V4']}/32"], dns=[NET["DNS_V4"]]),
        hosts=(NET["HOSTALIKE_V4"],))


def _parse(output: str) -> dict[str, dict[str, Any]]:
    results = {}
    for line in output.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            results[item["attempt"]] = item
    return results


def _spec(name: str, image: str, sidecar_image: str, network: str, repo: Path, out: Path,
          command: list[str], port: int) -> SandboxSpec:
    return SandboxSpec(
        image=image, sidecar_image=sidecar_image, name=name, command=tuple(command),
        policy=_policy(port), out_dir=out, secret_env={"ESCAPE_SECRET": "s3cr3t-marker"},
        networks=(network.replace(
            "_internet", "_intranet"),),
        run_id=name, repo_path=str(repo), network=network,
        env={**NET, "HOST_PORT": str(port), "HOST_GIT": "/run/host-git"},
        mounts=(Mount(SCRIPT, "/opt/escape/escape.sh", True),
                Mount(repo / ".git", "/run/host-git", True),
                Mount(repo.parent / "worktree", "/workspace", False)),
        limits=Limits(cpus=1.0, memory="512m", pids=256))


@pytest.fixture(scope="module")
def host_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("escape") / "repo"
    path.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"],
                 ["worktree", "add", "-q", "-b", "run", "../worktree"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


@pytest.fixture(scope="module")
def hostile_image(sandbox_image: str, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
                  ) -> Iterator[str]:
    """A project image built on the sandbox image whose layers neuter every part of
    git-iterare's set-up that used to run in the agent's container."""
    context = tmp_path_factory.mktemp("hostile")
    (context / "Dockerfile").write_text(HOSTILE_DOCKERFILE.format(
        base=sandbox_image, files=" ".join(NEUTERED)))
    tag = f"itr-hostile-project-{os.getpid()}:1"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True,
                   capture_output=True, timeout=300)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.fixture(scope="module")
def escape_runs(sandbox_image: str, hostile_image: str, test_network: str,  # noqa: F811
                host_listener: int, host_repo: Path,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the script as the agent and as capability-less root; results by mode.

    As a run would, the sandbox gets a worktree of the repository read-write at /workspace
    (its ``.git`` is a file naming a host path) and the main gitdir read-only.
    """
    base = tmp_path_factory.mktemp("escape-out")
    stamp = f"{int(time.time() * 1000) % 10**9}"
    agent_spec = _spec(f"itr-sandbox-escape-agent-{stamp}", hostile_image, sandbox_image,
                       test_network, host_repo, base / "agent",
                       ["/opt/real/bash", "/opt/escape/escape.sh"], host_listener)
    root_spec = _spec(f"itr-sandbox-escape-root-{stamp}", hostile_image, sandbox_image,
                      test_network, host_repo, base / "root", ["sleep", "300"],
                      host_listener)
    ids: list[str] = []
    try:
        agent_id = sandbox.start(agent_spec)
        ids.append(agent_id)
        code = sandbox.wait(agent_id, timeout=300)
        agent_out = b"".join(sandbox.output(agent_id, follow=True)).decode()
        sidecar_out = subprocess.run(["docker", "logs", f"{agent_spec.name}-net"],
                                     capture_output=True, text=True, check=False).stderr
        # The sidecar writes its refused-connection report.
        sandbox.remove(agent_spec.run_id, agent_spec.repo_path)
        report = sandbox.read_egress_report(agent_spec.out_dir)
        root_id = sandbox.start(root_spec)
        ids.append(root_id)
        # Root in the agent's container has no capabilities either (all dropped).
        root = subprocess.run(["docker", "exec", "-u", "0", root_id, "/opt/real/bash",
                               "/opt/escape/escape.sh"],
                              capture_output=True, text=True, timeout=300, check=False)
    finally:
        for made in (agent_spec, root_spec):
            sandbox.remove(made.run_id, made.repo_path)
    runs: dict[str, Any] = {"agent": _parse(agent_out), "root": _parse(root.stdout),
            "agent_exit": code, "agent_output": agent_out, "root_stderr": root.stderr,
            "sidecar_output": sidecar_out,
            "report": report, "git_status": subprocess.run(
                ["git", "status", "--porcelain", "--ignored"], cwd=host_repo,
                capture_output=True, text=True, check=True).stdout}
    tried = [r for mode in ("agent", "root") for r in runs[mode].values() if not r["control"]]
    escapes = [f"{r['attempt']}: {r['detail']}" for r in tried if r["escaped"]]
    summary = {"attempts": len(tried), "escapes": len(escapes), "escaped": escapes,
               "results": {mode: runs[mode] for mode in ("agent", "root")}}
    (base / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nescape suite: {summary['attempts']} attempts, {summary['escapes']} escapes "
          f"(details: {base / 'summary.json'})")
    runs["summary"] = summary
    return runs


@pytest.mark.parametrize("name", CONTROLS)
@pytest.mark.parametrize("mode", ["agent", "root"])
def test_allowed_names_work(escape_runs: dict[str, Any], mode: str, name: str) -> None:
    result = escape_runs[mode].get(name)
    assert result is not None, escape_runs["agent_output"] + escape_runs["root_stderr"]
    assert result["escaped"], result["detail"]


@pytest.mark.parametrize("name", [a for a in ATTEMPTS if a not in ONLY_ROOT])
def test_agent_cannot_escape(escape_runs: dict[str, Any], name: str) -> None:
    result = escape_runs["agent"].get(name)
    assert result is not None, f"attempt {name} did not run: {escape_runs['agent_output']}"
    assert not result["escaped"], result["detail"]


@pytest.mark.parametrize("name", [a for a in ATTEMPTS if a not in ONLY_AGENT])
def test_root_without_capabilities_cannot_escape(escape_runs: dict[str, Any], name: str
                                                 ) -> None:
    result = escape_runs["root"].get(name)
    assert result is not None, f"attempt {name} did not run: {escape_runs['root_stderr']}"
    assert not result["escaped"], result["detail"]


def test_escape_count_is_zero(escape_runs: dict[str, Any]) -> None:
    summary = escape_runs["summary"]
    expected = len([a for a in ATTEMPTS if a not in ONLY_ROOT]) + len(
        [a for a in ATTEMPTS if a not in ONLY_AGENT])
    assert summary["attempts"] == expected
    assert summary["escapes"] == 0, summary["escaped"]


def test_agent_script_exit_and_host_repo_untouched(escape_runs: dict[str, Any]) -> None:
    assert escape_runs["agent_exit"] == 0
    assert "iterare-sandbox: firewall up: 8 domains, 1 CIDRs" in escape_runs["sidecar_output"]
    assert "iterare-sandbox" not in escape_runs["agent_output"]
    assert escape_runs["git_status"] == ""


def test_egress_report_names_blocked_and_allowed(escape_runs: dict[str, Any]) -> None:
    report = escape_runs["report"]
    assert report.status["ok"] is True
    assert {"name": "embedded-dns-closed", "passed": True,
            "detail": "127.0.0.11 unreachable"} in report.status["checks"]
    assert {"allowed.test", "x.wild.test"} <= set(report.allowed)
    assert report.blocked.get("blocked.test", 0) >= 2
    assert "anything.example" in report.blocked
    assert "iterare-selfcheck.invalid" not in report.blocked
    assert not set(report.allowed) & set(report.blocked)
    assert report.refused_connections.recorded
    assert report.refused_connections.ipv4 > 0
    assert report.refused_connections.ipv6 > 0
    addresses = report.refused_connections.addresses
    for target in ("BLOCKED_V4", "DNS_V4", "GATEWAY_V4", "BLOCKED_V6", "INTRANET_V4",
                   "ALLOWED_V4", "HOSTALIKE_V4"):
        assert addresses.get(NET[target], 0) > 0, (target, addresses)
    assert "198.51.100.7" not in addresses  # the self-check's own probe


#: Stands in for /bin/sh in the image of the test below, so it ignores git-iterare's start
#: script and its wait: from the container's first moment it tries the network (a blocked
#: server, a private one no entry opens, the gateway's listener, and a name through
#: Docker's embedded DNS), noting whether the sandbox had said it was ready.
EARLY_PROBE = """\
#!/opt/real/bash
end=$(( SECONDS + 20 ))
while (( SECONDS < end )); do
    ready=no
    grep -qx '# iterare-sandbox: ready' /etc/resolv.conf && ready=yes
    for target in "$BLOCKED_V4/80" "$INTRANET_V4/80" "$GATEWAY_V4/$HOST_PORT"; do
        if timeout 1 /opt/real/bash -c "exec 3<>/dev/tcp/$target" 2>/dev/null; then
            echo "probe ready=$ready connected $target"
        else
            echo "probe ready=$ready refused $target"
        fi
    done
    if timeout 1 getent hosts early-probe.test >/dev/null 2>&1; then
        echo "probe ready=$ready resolved early-probe.test"
    fi
    [ "$ready" = yes ] && exit 0
    sleep 0.02
done
exit 3
"""


def test_nothing_gets_out_before_the_sandbox_is_ready(
        sandbox_image: str, hostile_image: str, test_network: str,  # noqa: F811
        host_listener: int, host_repo: Path,  # noqa: F811
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The agent's container starts while the sidecar still sets up the firewall (start-up
    time); the network namespace is locked (every packet dropped) until the rules are in,
    so a program that does not wait for the sandbox reaches nothing meanwhile."""
    import dataclasses

    context = tmp_path_factory.mktemp("early")
    (context / "probe").write_text(EARLY_PROBE)
    (context / "Dockerfile").write_text(
        f"FROM {hostile_image}\nCOPY probe /opt/probe\n"
        "RUN chmod 0755 /opt/probe && cp /opt/probe /bin/sh.new && mv /bin/sh.new /bin/sh\n")
    tag = f"itr-early-probe-{os.getpid()}:1"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True,
                   capture_output=True, timeout=300)
    try:
        early: list[str] = []
        for attempt in range(3):  # until the probe ran before the sandbox was ready
            spec = _spec(f"itr-early-{os.getpid()}-{attempt}", tag, sandbox_image,
                         test_network, host_repo, context / f"out{attempt}", ["true"],
                         host_listener)
            # A long allowlist keeps the sidecar busy between its lock and its rules, so
            # the probe starts inside that window (4,000 names: about half a second since
            # the sidecar parses without jq; 800 no longer held it open reliably).
            spec = dataclasses.replace(spec, policy=dataclasses.replace(
                spec.policy, domains=(*spec.policy.domains,
                                      *(f"n{i}.early.test" for i in range(4000)))))
            cid = sandbox.start(spec)
            try:
                code = sandbox.wait(cid, timeout=60)
                lines = [line.decode() for line in sandbox.output(cid, follow=True)]
            finally:
                sandbox.remove(spec.run_id, spec.repo_path)
            probes = [line.split() for line in lines if line.startswith("probe ")]
            assert code == 0, lines
            assert not [p for p in probes if p[2] in ("connected", "resolved")], probes
            early = [" ".join(p) for p in probes if p[1] == "ready=no"]
            if early:
                break
        assert early, "the probe never ran before the sandbox was ready"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def _probe_attached(name: str, image: str, network: str, host_repo: Path, out: Path,
                    targets: list[str]) -> list[str]:
    """Run a sandbox attached to the test's intranet that tries TCP to each of
    ``targets`` (``ADDRESS/PORT``); return its ``open T`` / ``closed T`` lines."""
    import dataclasses

    policy = dataclasses.replace(
        EgressPolicy.build([], dns=[NET["DNS_V4"]]),
        networks=(NET["INTRANET_V4"].rsplit(".", 1)[0] + ".0/24",))
    script = (f"for t in {' '.join(targets)}; do "
              "if timeout 3 bash -c \"exec 3<>/dev/tcp/$t\" 2>/dev/null; "
              "then echo \"open $t\"; else echo \"closed $t\"; fi; done")
    spec = dataclasses.replace(
        _spec(name, image, image, network, host_repo, out, ["bash", "-c", script], 1),
        policy=policy, networks=(network.replace("_internet", "_intranet"),))
    cid = sandbox.start(spec)
    try:
        assert sandbox.wait(cid, timeout=60) == 0
        output = b"".join(sandbox.output(cid, follow=True)).decode()
    finally:
        sandbox.remove(spec.run_id, spec.repo_path)
    return [line for line in output.splitlines() if line.startswith(("open ", "closed "))]


def test_an_attached_network_opens_its_containers_but_not_the_host(
        sandbox_image: str, test_network: str, host_repo: Path,  # noqa: F811
        tmp_path: Path) -> None:
    """``--docker-network`` lets the sandbox reach that network's subnet; the subnet holds
    the Docker host's bridge address, which stays closed (a CIDR entry of the user's own
    would open it)."""
    import socket

    gateway = NET["INTRANET_V4"].rsplit(".", 1)[0] + ".1"
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((gateway, 0))
    server.listen(4)
    port = server.getsockname()[1]
    try:
        seen = _probe_attached(f"itr-attached-{os.getpid()}", sandbox_image, test_network,
                               host_repo, tmp_path / "out",
                               [f"{NET['INTRANET_V4']}/80", f"{gateway}/{port}"])
    finally:
        server.close()
    # A container on it; the host, on its bridge.
    assert seen == [f"open {NET['INTRANET_V4']}/80", f"closed {gateway}/{port}"]


def test_an_attached_networks_resolvers_stay_closed(
        sandbox_image: str, test_network: str, host_repo: Path,  # noqa: F811
        tmp_path: Path) -> None:
    """A resolver on an attached network would answer any name over TCP (UDP is closed
    anyway), carrying what the agent puts in the query out: its DNS ports (53, and 853 for
    DNS over TLS) stay closed; the network's other ports stay open."""
    intranet = test_network.replace("_internet", "_intranet")
    name = f"itr-resolver-{os.getpid()}"
    listen = " & ".join(f"python3 -m http.server {p}" for p in (53, 853, 5432)) + " & wait"
    subprocess.run(["docker", "run", "-d", "--name", name, "--network", intranet,
                    "itr-sandbox-testnet:1", "bash", "-c", listen],
                   check=True, capture_output=True)
    try:
        address = subprocess.run(
            ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}"
             "{{end}}", name], check=True, capture_output=True, text=True).stdout.strip()
        deadline = time.monotonic() + 30
        while subprocess.run(["docker", "exec", name, "bash", "-c",
                              "exec 3<>/dev/tcp/127.0.0.1/5432"],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.3)
        seen = _probe_attached(f"itr-resolvers-{os.getpid()}", sandbox_image, test_network,
                               host_repo, tmp_path / "out",
                               [f"{address}/{p}" for p in (5432, 53, 853)])
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert seen == [f"open {address}/5432", f"closed {address}/53", f"closed {address}/853"]
