"""An egress for an agent that shares no network namespace with git-iterare's container
(the design for swarm services, which cannot join one: container/sidecar with
ITERARE_PROXY_PORT, git_iterare/sandbox/egress_proxy.py), on this machine's engine.

The agent's container is on an internal network whose only other member is the egress:
git-iterare's own image on that network and on the escape suite's local internet. The
escape suite (sandbox_net/escape.sh) runs in the agent's container, from the hostile
project image that neuters every firewall tool, as the agent and as capability-less root.
Nothing may get out but through the proxy, and through it only what the allowlist allows.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandbox_fixtures import (  # noqa: F401 (fixtures)
    NET,
    docker_cleanup,
    docker_compose_command,
    docker_compose_file,
    docker_compose_project_name,
    docker_setup,
    host_listener,
    sandbox_image,
    test_network,
)
from tests.test_sandbox_escape import SCRIPT, _parse, _policy, hostile_image  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

from git_iterare.sandbox.sidecar import SIDECAR_CAPABILITIES, SIDECAR_SYSCTLS  # noqa: E402

AGENT = "1900000:1900000"
PORT = 3128
#: What works through the proxy (the escape suite's controls that do not need the
#: agent's own resolver or IPv6: an egress's agent resolves nothing itself).
CONTROLS = ("allowed-name-works", "wildcard-name-works", "cname-name-works",
            "named-port-works", "cidr-address-works", "high-port-bind-works")
#: The proxy's refusals come back as an HTTP answer, which curl (without --fail) takes for
#: success: such a body is not an escape.
REFUSED_BY_PROXY = "iterare-egress: "


def _docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr[-2000:]}")
    return result.stdout.strip()


@pytest.fixture(scope="module")
def egress(sandbox_image: str, test_network: str, host_listener: int  # noqa: F811
           ) -> Iterator[dict[str, str]]:
    """The run's internal network and its egress (also on the local internet and its
    intranet, as the escape suite's sandbox is), ready; yields their names and the
    network's subnet and gateway."""
    stamp = f"{int(time.time() * 1000) % 10**9}"
    run_net, egress_name = f"itr-egress-run-{stamp}", f"itr-egress-{stamp}"
    # inhibit_ipv4: the host's end of the bridge gets no address, so the host is no member
    # of the network (as on an overlay, whose bridge is in a namespace of its own).
    _docker("network", "create", "--internal", "--label", "dev.iterare.test=egress",
            "-o", "com.docker.network.bridge.inhibit_ipv4=true", run_net)
    try:
        ipam = json.loads(_docker("network", "inspect", "--format", "{{json .IPAM.Config}}",
                                  run_net))[0]
        policy = _policy(host_listener).to_lines()
        args = ["create", "--name", egress_name, "--network", test_network,
                "--cap-drop", "ALL", *(f"--cap-add={c}" for c in SIDECAR_CAPABILITIES),
                "--security-opt", "no-new-privileges:true",
                *(f"--sysctl={k}={v}" for k, v in SIDECAR_SYSCTLS.items()),
                "-e", f"ITERARE_POLICY={policy}", "-e", "ITERARE_AGENT_UID=1900000",
                "-e", "ITERARE_AGENT_GID=1900000", "-e", "ITERARE_TREES=",
                "-e", f"ITERARE_PROXY_PORT={PORT}", "-e", f"ITERARE_PROXY_FROM={ipam['Subnet']}",
                sandbox_image]
        _docker(*args)
        _docker("network", "connect", test_network.replace("_internet", "_intranet"),
                egress_name)
        _docker("network", "connect", "--alias", "egress", run_net, egress_name)
        _docker("start", egress_name)
        deadline = time.monotonic() + 60
        logs = ""
        while time.monotonic() < deadline:
            logs = subprocess.run(["docker", "logs", egress_name], capture_output=True,
                                  text=True, check=False).stderr
            if "iterare-sandbox: ready" in logs or "error:" in logs:
                break
            time.sleep(0.2)
        assert "iterare-sandbox: ready" in logs, logs[-3000:]
        yield {"network": run_net, "egress": egress_name, "subnet": ipam["Subnet"],
               "gateway": ipam.get("Gateway", "")}
    finally:
        _docker("rm", "-f", egress_name, check=False)
        _docker("network", "rm", run_net, check=False)


def _agent_args(name: str, egress: dict[str, str], port: int) -> list[str]:
    proxy = f"http://egress:{PORT}"
    env = {**NET, "HOST_PORT": str(port), "HOST_GIT": "/nonexistent",
           "RUN_GATEWAY": egress["gateway"],
           **{k: proxy for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}}
    return ["--name", name, "--network", egress["network"], "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges:true", "--pids-limit", "256",
            *(f"--sysctl={k}={v}" for k, v in SIDECAR_SYSCTLS.items()),
            "--memory", "512m", "-v", f"{SCRIPT}:/opt/escape/escape.sh:ro",
            *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
            "--entrypoint", "/opt/real/bash"]


@pytest.fixture(scope="module")
def any_listener() -> Iterator[int]:
    """A TCP port of this machine open on all its addresses (accepted, then closed)."""
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture(scope="module")
def runs(egress: dict[str, str], hostile_image: str, host_listener: int,  # noqa: F811
         any_listener: int) -> Iterator[dict[str, Any]]:
    stamp = f"{int(time.time() * 1000) % 10**9}"
    agent, root = f"itr-egress-agent-{stamp}", f"itr-egress-root-{stamp}"
    try:
        out = subprocess.run(["docker", "run", "--user", AGENT,
                              *_agent_args(agent, egress, host_listener), hostile_image,
                              "/opt/escape/escape.sh"],
                             capture_output=True, text=True, timeout=600, check=False)
        _docker("run", "-d", *_agent_args(root, egress, host_listener), hostile_image,
                "-c", "sleep 600")
        as_root = subprocess.run(["docker", "exec", "-u", "0", root, "/opt/real/bash",
                                  "/opt/escape/escape.sh"],
                                 capture_output=True, text=True, timeout=600, check=False)
        gateway = subprocess.run(
            ["docker", "exec", "-u", "0", root, "/opt/real/bash", "-c",
             f"exec 3<>/dev/tcp/{egress['gateway']}/{any_listener}"],
            capture_output=True, text=True, timeout=60, check=False)
        proxy_log = subprocess.run(["docker", "logs", egress["egress"]], capture_output=True,
                                   text=True, check=False)
        yield {"agent": _parse(out.stdout), "root": _parse(as_root.stdout),
               "agent_stderr": out.stderr, "gateway_exit": gateway.returncode,
               "proxy_log": proxy_log.stdout + proxy_log.stderr}
    finally:
        _docker("rm", "-f", agent, root, check=False)


def _escaped(result: dict[str, Any]) -> bool:
    return bool(result["escaped"]) and REFUSED_BY_PROXY not in result["detail"]


@pytest.mark.parametrize("mode", ["agent", "root"])
def test_allowed_names_work_through_the_egress(runs: dict[str, Any], mode: str) -> None:
    results = runs[mode]
    assert results, runs["agent_stderr"][-2000:]
    failed = {n: results.get(n, {}).get("detail") for n in CONTROLS
              if not results.get(n, {}).get("escaped")}
    assert not failed, failed


@pytest.mark.parametrize("mode", ["agent", "root"])
def test_nothing_gets_out_but_through_the_allowlist(runs: dict[str, Any], mode: str) -> None:
    tried = [r for r in runs[mode].values() if not r["control"]]
    assert len(tried) >= 50, tried
    escapes = [f"{r['attempt']}: {r['detail']}" for r in tried if _escaped(r)]
    assert not escapes, escapes
    print(f"\negress escape suite ({mode}): {len(tried)} attempts, {len(escapes)} escapes")


def test_the_proxy_logs_its_refusals(runs: dict[str, Any]) -> None:
    decisions = [json.loads(line) for line in runs["proxy_log"].splitlines()
                 if line.startswith('{"egress"')]
    refused = {d["host"] for d in decisions if d["egress"] == "refused"}
    allowed = {d["host"] for d in decisions if d["egress"] == "allowed"}
    assert "blocked.test" in refused and "allowed.test" in allowed, decisions[-20:]
    assert any(re.fullmatch(r"10\.231\.\d+\.31", h) for h in allowed)  # the CIDR entry


def test_the_run_network_has_no_way_to_the_host(runs: dict[str, Any]) -> None:
    """The internal network's gateway address (on this engine, the host's end of its
    bridge) is not a way to the host's services (one listens on every address)."""
    assert runs["gateway_exit"] != 0
