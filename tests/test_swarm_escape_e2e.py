"""The escape suite (sandbox_net/escape.sh) on the swarm lab (tests/swarm.py), from a real
``git iterare execute`` run of the shell agent whose task runs on a worker in a *hostile
project image* (the repository's ``.iterare/Dockerfile``, built by git iterare on the
manager and pushed by it to the lab's registry) that neuters every firewall tool.

The escape suite's local internet is built inside the manager's engine (its egress is
there, on ``[docker] network``): the images are loaded into it and its networks and
containers made through its API, from sandbox_net/docker-compose.yml. The intranet is a
second network of the manager routed to the first (a ``DOCKER-USER`` rule in the
manager, as a company's router would), so ``firewall.allowed_cidrs`` opens one of its
addresses and nothing else. ``gw.test`` names the manager's gateway address on the
internet, where its dockerd listens on 2376.

Beside the suite, the task tries what only a swarm has: the tree server of another run
(by its address on that run's overlay, directly and through the egress) and the Engine
API and swarm ports (2375, 2376, 2377, 7946) of every node. Only the run's own tree
server and the allowlist through the proxy may answer.

The task has no no-new-privileges of the engine's (Engine API 1.41 has none for services):
it starts under git-iterare's ``iterare-nnp`` (``container/nnp.c``), which sets it before
anything of the image runs. This image also turns its ``setpriv`` into a plain ``exec``,
which must change nothing.
About 7.5 min here (2 cores shared): the project image's build and push on the manager
with the first run about 150 s, the escape run about 90 s, stop and cleanup about 30 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from git_iterare.sandbox.spec import LABEL_ROLE, LABEL_RUN
from tests import engines
from tests.conftest import BIN_DIR, git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.sandbox_fixtures import BASE_IMAGE, NET, NET_DIR, subnet
from tests.swarm import SwarmLab
from tests.test_egress_service_e2e import CONTROLS, REFUSED_BY_PROXY
from tests.test_sandbox_escape import HOSTILE_DOCKERFILE, NEUTERED, SCRIPT, _parse
from tests.test_swarm_runs_e2e import BUSY_TASK, _wait_for, swarm_image  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: The local internet's image, of this test's own (built from sandbox_net/).
NET_IMAGE = "iterare-test-swarmescape-net:1"
#: The port of the manager's dockerd on all its addresses (so also on the gateway).
ENGINE_PORT = 2376
#: Ports of a node that must stay closed to a task: the Engine API (plain and TLS), the
#: swarm's control plane and its gossip.
NODE_PORTS = (2375, 2376, 2377, 7946)
#: Names the run may reach (as the local escape suite's policy, without hostalike.test:
#: the policy's list of the Docker host's own addresses is the engine's, not the user's).
DOMAINS = ("allowed.test", "*.wild.test", "cdn.test", "port.test:8080", "private.test",
           "ns.test", f"gw.test:{ENGINE_PORT}")
SETPRIV = "/usr/bin/setpriv"
#: A swarm's task has no no-new-privileges flag of the engine's (API 1.41 has none): a
#: hostile image's setpriv is a plain exec (a do-nothing setpriv would only keep the agent
#: from running at all); the bit must be set all the same.
HOSTILE_SETPRIV = (f"RUN printf '#!/bin/sh\\nshift\\nexec \"$@\"\\n' > {SETPRIV}"
                   f" && chmod 0755 {SETPRIV}\n")
#: The swarm's own attempts, after the suite (OTHER: the other run's tree server's
#: address; NODES: every node's address on the lab network).
SWARM_ATTEMPTS = r"""
emit() {
    jq -cn --arg a "$1" --argjson e "$2" --arg d "$3" --argjson c "${4:-false}" \
        '{attempt: $a, escaped: $e, control: $c, detail: ($d | .[0:300])}'
}
try() { # try NAME CONTROL COMMAND...: escaped (or, for a control, worked) if it succeeds
    local name=$1 control=$2; shift 2
    if out=$(timeout 8 bash -c '"$@"' try "$@" 2>&1); then
        emit "$name" true "succeeded: $(tr '\n' ' ' <<<"$out")" "$control"
    else
        emit "$name" false "failed: $(tr '\n' ' ' <<<"$out" | tail -c 200)" "$control"
    fi
}
ready() { [ "$(curl -fsS --max-time 4 "$@")" = ready ]; }
export -f ready
try own-trees-works true ready --noproxy '*' http://trees:8080/ready
try other-trees-direct false ready --noproxy '*' "http://$OTHER:8080/ready"
try other-trees-via-egress false ready "http://$OTHER:8080/ready"
try other-trees-tcp false bash -c "exec 3<>/dev/tcp/$OTHER/8080"
try other-trees-by-name false ready "http://$OTHER_NAME:8080/ready"
# The manager's dockerd on the gateway of the egress's network, by an allowed name whose
# entry names the port, and by address.
try gateway-engine-by-name-via-egress false curl -fsS -k --max-time 4 \
    "https://gw.test:$HOST_PORT/version"
try gateway-engine-via-egress false curl -fsS -k --max-time 4 \
    "https://$GATEWAY_V4:$HOST_PORT/version"
for node in $NODES; do
    for port in 2375 2376 2377 7946; do
        try "node-$node-$port-tcp" false bash -c "exec 3<>/dev/tcp/$node/$port"
        try "node-$node-$port-via-egress" false curl -fsS -k --max-time 4 \
            "https://$node:$port/version"
    done
done
"""


def _local(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600,
                          check=False, env=engines.local_env())
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout.strip()


def _manager_exec(swarm: SwarmLab, *command: str) -> str:
    """Run ``command`` in the manager's container (its network namespace, as root)."""
    return _local("exec", swarm.manager.container, *command)


def _services(n: int) -> dict[str, Any]:
    """sandbox_net/docker-compose.yml's services, with ``N`` for ``${ITR_TESTNET}``."""
    text = (NET_DIR / "docker-compose.yml").read_text().replace("${ITR_TESTNET}", str(n))
    services: dict[str, Any] = yaml.safe_load(text)["services"]
    return services


def _forward(swarm: SwarmLab, n: int, add: bool) -> None:
    """Route between the manager's internet and intranet (Docker isolates its bridges)."""
    for source, target in ((f"198.18.{n}.0/24", f"10.231.{n}.0/24"),
                           (f"10.231.{n}.0/24", f"198.18.{n}.0/24")):
        _manager_exec(swarm, "iptables", "-w", "-I" if add else "-D", "DOCKER-USER",
                      "-s", source, "-d", target, "-j", "ACCEPT")


@pytest.fixture(scope="module")
def manager_internet(swarm: SwarmLab) -> Iterator[str]:
    """The escape suite's local internet inside the manager's engine; yields the name of
    its internet network there."""
    n = subnet()
    _local("build", "-q", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", NET_IMAGE,
           str(NET_DIR))
    swarm.manager.load_image(NET_IMAGE)
    api = swarm.manager.client().api
    import docker.types

    tag = f"itr-swarmescape-{n}"
    names = {"internet": f"{tag}-internet", "intranet": f"{tag}-intranet"}
    pools = {"internet": [docker.types.IPAMPool(subnet=f"198.18.{n}.0/24",
                                                gateway=f"198.18.{n}.1"),
                          docker.types.IPAMPool(subnet=f"2001:db8:{n}::/64",
                                                gateway=f"2001:db8:{n}::1")],
             "intranet": [docker.types.IPAMPool(subnet=f"10.231.{n}.0/24",
                                                gateway=f"10.231.{n}.1")]}
    made: list[str] = []
    routed = False
    try:
        for key, name in names.items():
            api.create_network(name, driver="bridge", enable_ipv6=key == "internet",
                               ipam=docker.types.IPAMConfig(pool_configs=pools[key]),
                               labels={"dev.iterare.test": "swarmescape"})
        for service, spec in _services(n).items():
            (key, addresses), = spec["networks"].items()
            endpoint = api.create_endpoint_config(
                ipv4_address=addresses.get("ipv4_address"),
                ipv6_address=addresses.get("ipv6_address"))
            container = api.create_container(
                NET_IMAGE, command=shlex.split(spec["command"]), name=f"{tag}-{service}",
                labels={"dev.iterare.test": "swarmescape"},
                host_config=api.create_host_config(network_mode=names[key]),
                networking_config=api.create_networking_config({names[key]: endpoint}))
            made.append(container["Id"])
            api.start(container["Id"])
        _forward(swarm, n, add=True)
        routed = True
        for target in ("ALLOWED_V4", "BLOCKED_V4", "INTRANET2_V4"):  # the servers are up
            deadline = time.monotonic() + 60
            while subprocess.run(
                    ["docker", "exec", swarm.manager.container, "bash", "-c",
                     f"exec 3<>/dev/tcp/{NET[target]}/80"], capture_output=True,
                    env=engines.local_env(), check=False).returncode != 0:
                assert time.monotonic() < deadline, f"{target} did not come up"
                time.sleep(0.3)
        yield names["internet"]
    finally:
        if routed:
            _forward(swarm, n, add=False)
        for container in made:
            api.remove_container(container, force=True)
        for name in names.values():
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_network(name)
        api.remove_image(NET_IMAGE, force=True)


def _hermetic(patch: pytest.MonkeyPatch, home: Path, swarm: SwarmLab) -> None:
    """As tests/conftest.py's ``hermetic_env`` (function-scoped) for this module's runs,
    which the module's tests share; the engine is the swarm's manager."""
    for name in list(os.environ):
        if name.startswith(("GIT_", "ITERARE_", "DOCKER_")) or name in (
                "NO_COLOR", "XDG_CONFIG_HOME"):
            patch.delenv(name, raising=False)
    for name, value in {
            "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
            "GIT_COMMITTER_NAME": "Test Committer",
            "GIT_COMMITTER_EMAIL": "committer@example.com", "GIT_EDITOR": "false",
            "GIT_PAGER": "cat", "PAGER": "cat",
            "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
            **swarm.manager.tls_env()}.items():
        patch.setenv(name, value)
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")


def _hostile_project(repo: Path, home: Path, swarm: SwarmLab, image: str,
                     internet: str) -> None:
    """Make ``repo`` with the hostile ``.iterare/Dockerfile`` and escape.sh, trusted, whose
    runs go to the swarm lab with the escape suite's allowlist and local internet (the
    user's configuration, in ``home``)."""
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    config = home / ".config" / "iterare"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'[docker]\nimage = "{image}"\ncpus = 1\nmemory = "1g"\n'
        f'network = "{internet}"\ndns = ["{NET["DNS_V4"]}"]\n'
        f'[firewall]\nallowed_domains = {json.dumps(list(DOMAINS))}\n'
        f'allowed_cidrs = ["{NET["INTRANET2_V4"]}/32"]\n'
        f'[run]\nagent = "shell"\n[swarm]\nenabled = true\nregistry = "{swarm.registry}"\n'
        'constraints = ["node.role==worker"]\nsnapshot_seconds = 0\n')
    iterare_dir = repo / ".iterare"
    (iterare_dir / "prompts").mkdir(parents=True)
    (iterare_dir / ".gitignore").write_text("/worktrees/\n")
    (iterare_dir / "Dockerfile").write_text(HOSTILE_DOCKERFILE.format(
        base=image, files=" ".join(f for f in NEUTERED if f != SETPRIV))
        + HOSTILE_SETPRIV)
    (repo / "escape.sh").write_bytes(SCRIPT.read_bytes())
    git("add", ".", cwd=repo)
    git("commit", "-qm", "hostile project", cwd=repo)
    trusted = iterare("trust", "--yes", cwd=repo)
    assert trusted.returncode == 0, trusted.stderr


def _trees_of(swarm: SwarmLab, rid: str) -> tuple[str, str]:
    """The name and overlay address of run ``rid``'s tree server on the manager."""
    api = swarm.manager.client().api
    found = api.containers(filters={"label": [f"{LABEL_RUN}={rid}", f"{LABEL_ROLE}=trees"]})
    assert len(found) == 1, found
    networks = found[0]["NetworkSettings"]["Networks"]
    (address,) = [n["IPAddress"] for name, n in networks.items() if name.endswith("-run")]
    return found[0]["Names"][0].lstrip("/"), address


def _escape_prompt(other: str, other_name: str, nodes: list[str]) -> str:
    env = {**{k: NET[k] for k in NET}, "HOST_PORT": str(ENGINE_PORT),
           "HOST_GIT": "/nonexistent", "OWN_GITDIR": "/git/run", "OTHER": other,
           "OTHER_NAME": other_name, "NODES": " ".join(nodes)}
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return exports + "set +e\n/opt/real/bash ./escape.sh\n" + SWARM_ATTEMPTS


def _escaped(result: dict[str, Any]) -> bool:
    return bool(result["escaped"]) and REFUSED_BY_PROXY not in result["detail"]


def _left(swarm: SwarmLab, timeout: float = 60) -> list[str]:
    """What the runs left on the lab once removals settled (this module's local internet,
    removed after the module, aside)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [x for x in swarm.leftovers() if "itr-swarmescape-" not in x]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture(scope="module")
def escape_runs(swarm: SwarmLab, swarm_image: str, manager_internet: str,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A busy run, then the escape run beside it (which goes after the busy run's tree
    server); yields the escape run's results by attempt and what the test measured."""
    home = tmp_path_factory.mktemp("swarmescape-home")
    project = tmp_path_factory.mktemp("swarmescape") / "repo"
    with pytest.MonkeyPatch.context() as patch:
        _hermetic(patch, home, swarm)
        _hostile_project(project, home, swarm, swarm_image, manager_internet)
        try:
            began = time.monotonic()
            prompt(project, "busy", BUSY_TASK)
            git("add", ".", cwd=project)
            git("commit", "-qm", "busy", cwd=project)
            busy = iterare("execute", "busy", cwd=project)
            assert busy.returncode == 0, busy.stderr
            first = run_id(busy.stdout)
            _wait_for("the busy run's output", lambda: "started" in iterare(
                "log", first, cwd=project).stdout)
            busy_up = time.monotonic()
            other_name, other = _trees_of(swarm, first)
            nodes = [swarm.address(engine) for engine in swarm.nodes]
            prompt(project, "escape", _escape_prompt(other, other_name, nodes))
            git("add", ".", cwd=project)
            git("commit", "-qm", "escape", cwd=project)
            ran = iterare("execute", "escape", "--follow", cwd=project)
            escaped_at = time.monotonic()
            second = run_id(ran.stdout)
            stopped = iterare("stop", first, cwd=project)
            rec = record(project, second)
        finally:
            iterare("cleanup", "-y", "--force", "--all", cwd=project)
            iterare("cleanup", "--cache", cwd=project)
            inner = swarm.manager.client()
            for image in inner.images.list(filters={"label": "dev.iterare.image=project"}):
                inner.images.remove(image.id, force=True)
        left = _left(swarm)
        done = time.monotonic()
    results = _parse(ran.stdout)
    seconds = {"busy run up (project image built and pushed)": busy_up - began,
               "escape run": escaped_at - busy_up, "stop, cleanup, settle": done - escaped_at}
    tried = [r for r in results.values() if not r["control"]]
    print(f"\nswarm escape suite: {len(tried)} attempts, "
          f"{len([r for r in tried if _escaped(r)])} escapes; "
          + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    yield {"results": results, "tried": tried, "run": ran, "record": rec,
           "stopped": stopped, "nodes": nodes, "left": left, "seconds": seconds}


#: Attempts that get out on a swarm, each a known hole (none).
KNOWN_HOLES: set[str] = set()


def test_the_escape_run_ran_on_a_worker(escape_runs: dict[str, Any], swarm: SwarmLab
                                        ) -> None:
    ran = escape_runs["run"]
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    rec = escape_runs["record"]
    assert (rec["status"], rec["placement"]) == ("succeeded", "swarm")
    assert rec["extra"]["swarm"]["node_id"] in {swarm.node_id(w) for w in swarm.workers}
    assert escape_runs["stopped"].returncode == 0, escape_runs["stopped"].stderr


def test_allowed_names_and_own_trees_work_through_the_egress(
        escape_runs: dict[str, Any]) -> None:
    results = escape_runs["results"]
    failed = {n: results.get(n, {}).get("detail") for n in (*CONTROLS, "own-trees-works")
              if not results.get(n, {}).get("escaped")}
    assert not failed, (failed, escape_runs["run"].stdout[-3000:])


def test_nothing_gets_out_of_a_swarm_run(escape_runs: dict[str, Any]) -> None:
    tried = escape_runs["tried"]
    assert len(tried) >= 50, escape_runs["run"].stdout[-3000:]
    escapes = [f"{r['attempt']}: {r['detail']}" for r in tried
               if _escaped(r) and r["attempt"] not in KNOWN_HOLES]
    assert not escapes, escapes


def test_another_runs_tree_server_and_the_nodes_engines_were_tried(
        escape_runs: dict[str, Any]) -> None:
    results = escape_runs["results"]
    wanted = {f"node-{a}-{p}-{how}" for a in escape_runs["nodes"] for p in NODE_PORTS
              for how in ("tcp", "via-egress")}
    wanted |= {"other-trees-direct", "other-trees-via-egress", "other-trees-tcp",
               "other-trees-by-name", "host-bridge-listener",
               "gateway-engine-by-name-via-egress", "gateway-engine-via-egress"}
    assert wanted <= results.keys(), wanted - results.keys()
    assert not [n for n in wanted if _escaped(results[n])]


def test_the_agent_has_no_new_privileges(escape_runs: dict[str, Any]) -> None:
    assert not escape_runs["results"]["no-new-privs-off"]["escaped"]


def test_nothing_is_left_on_the_lab(escape_runs: dict[str, Any]) -> None:
    assert escape_runs["left"] == []
