"""Facts of a real swarm (tests/swarm.py) the swarm backend relies on, each asserted: the lab
itself, replicated jobs by digest with exit codes and logs, internal overlays, CPU
reservations that queue, a node's death, and secrets' ownership. Engine API 1.41 through the
docker SDK, as the backend will speak it."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.swarm import API_VERSION, WORKERS_ONLY, SwarmLab

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def image(swarm: SwarmLab, sandbox_base: str) -> str:
    """The Debian base pushed into the lab's registry; its digest reference."""
    return swarm.push(sandbox_base)


@pytest.fixture(scope="module")
def sandbox_base() -> str:
    """The local Debian base image (built by .ci/setup)."""
    from tests import engines

    return engines.BASE_IMAGE


@pytest.fixture
def client(swarm: SwarmLab) -> Iterator[Any]:
    """The manager's SDK client; the swarm is clean again after the test (nothing of it
    left on any live node: :meth:`SwarmLab.leftovers`)."""
    made = swarm.manager.client()
    yield made
    for service in made.services.list():
        service.remove()
    for secret in made.secrets.list():
        _until(functools.partial(_removed, secret), 30)
    for network in made.networks.list(filters={"driver": "overlay"}):
        if network.name != "ingress":
            _until(functools.partial(_removed, network), 30)
    swarm.sweep()  # removed jobs' containers stay on the nodes (see the test below)
    # A node drops its copy of an overlay a moment after the network's last container.
    deadline = time.monotonic() + 15
    while (left := swarm.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []


def _removed(thing: Any) -> bool:
    """Remove ``thing`` (a secret or network); False while the swarm still holds it."""
    import docker.errors

    try:
        thing.remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False
    return True


def _until(check: Callable[[], Any], timeout: float, step: float = 0.3) -> Any:
    """Poll ``check`` until it returns something truthy; return it (fail after
    ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(step)


def _name(what: str) -> str:
    return f"swarmlab-{what}-{uuid.uuid4().hex[:6]}"


def test_lab_is_an_active_manager_and_ready_workers(swarm: SwarmLab, image: str) -> None:
    client = swarm.manager.client()
    assert client.version()["ApiVersion"] == API_VERSION
    dead = {swarm.node_id(engine) for engine in swarm.dead}  # killed by another test
    nodes = {n.id: n.attrs for n in client.nodes.list() if n.id not in dead}
    assert len(nodes) == 1 + len(swarm.workers) >= 3
    manager = nodes[swarm.node_id(swarm.manager)]
    assert manager["Spec"]["Role"] == "manager"
    # Active: a drained node takes no network attachments, and a run's egress and tree
    # server join its network there (runs keep to the workers by a constraint).
    assert manager["Spec"]["Availability"] == "active"
    for worker in swarm.workers:
        attrs = nodes[swarm.node_id(worker)]
        assert (attrs["Spec"]["Role"], attrs["Status"]["State"]) == ("worker", "ready")
    assert image.startswith(f"{swarm.registry}/iterare-base@sha256:")
    for node in swarm.nodes:  # every node pulls from the registry over plain HTTP
        assert node.client().info()["RegistryConfig"]["IndexConfigs"][swarm.registry][
            "Secure"] is False
    print(f"\nswarm lab up in {swarm.startup_seconds:.1f} s")


#: States a task ends in (it runs no more).
ENDED = frozenset({"complete", "failed", "rejected", "shutdown", "orphaned", "remove"})


def _job(client: Any, image: str, command: list[str], **kwargs: Any) -> Any:
    """A replicated-job service as the backend makes a run: one completion, one at a time,
    never restarted, DNS round robin (no IPVS here); ``kwargs`` go to ``services.create``."""
    from docker.types import EndpointSpec, RestartPolicy, ServiceMode

    kwargs.setdefault("constraints", list(WORKERS_ONLY))
    return client.services.create(
        image, command=command, name=kwargs.pop("name", _name("job")),
        mode=ServiceMode("replicated-job", replicas=1, concurrency=1),
        restart_policy=RestartPolicy(condition="none"),
        endpoint_spec=EndpointSpec(mode="dnsrr"), **kwargs)


def _task(service: Any) -> dict[str, Any] | None:
    """The service's one task, or None before the orchestrator made it."""
    tasks = service.tasks()
    assert len(tasks) <= 1, tasks
    return tasks[0] if tasks else None


def _ended(service: Any, timeout: float = 90) -> dict[str, Any]:
    """Wait until the service's task ended; return it."""
    return _until(lambda: (t := _task(service)) and t["Status"]["State"] in ENDED and t,
                  timeout)


def _logs(service: Any) -> str:
    return b"".join(service.logs(stdout=True, stderr=True)).decode()


def test_a_job_by_digest_runs_on_a_worker_with_its_exit_code_and_logs(
        swarm: SwarmLab, client: Any, image: str) -> None:
    began = time.monotonic()
    service = _job(client, image, ["sh", "-c", "echo out-line; echo err-line >&2; exit 3"])
    task = _ended(service)
    seconds = time.monotonic() - began
    status = task["Status"]
    assert status["State"] == "failed"
    assert status["ContainerStatus"]["ExitCode"] == 3
    assert status["Err"] == "task: non-zero exit (3)"
    assert swarm.engine_of(task["NodeID"]) in swarm.workers
    assert service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"] == image
    logs = _logs(service)
    assert "out-line" in logs and "err-line" in logs
    ok = _job(client, image, ["true"])
    assert _ended(ok)["Status"]["State"] == "complete"
    assert _ended(ok)["Status"]["ContainerStatus"]["ExitCode"] == 0
    print(f"\nfailed job ended in {seconds:.1f} s: {status['State']} "
          f"{status['ContainerStatus']['ExitCode']} {status['Err']!r}")


#: Exits 0 when the registry's port answers, 7 when not; prints the routing table first.
REACH = ("cat /proc/net/route; "
         "if timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}'; then echo reached; exit 0;"
         " else echo unreachable; exit 7; fi")


def test_an_internal_overlay_has_no_way_out(swarm: SwarmLab, client: Any, image: str
                                            ) -> None:
    host, port = swarm.registry.split(":")
    command = ["bash", "-c", REACH.format(host=host, port=port)]
    inside = client.networks.create(_name("internal"), driver="overlay", internal=True,
                                    attachable=True)
    outside = client.networks.create(_name("open"), driver="overlay", attachable=True)
    shut = _job(client, image, command, networks=[inside.name])
    open_ = _job(client, image, command, networks=[outside.name])
    shut_task, open_task = _ended(shut), _ended(open_)
    assert open_task["Status"]["ContainerStatus"]["ExitCode"] == 0, _logs(open_)
    assert shut_task["Status"]["ContainerStatus"]["ExitCode"] == 7, _logs(shut)
    routes = _logs(shut)
    assert "unreachable" in routes
    # No default route (destination 00000000) on the internal overlay alone.
    assert not [line for line in routes.splitlines() if line.split()[1:2] == ["00000000"]]
    print(f"\ninternal overlay routes:\n{routes}")


def test_a_reservation_larger_than_any_node_queues_with_the_reason(
        swarm: SwarmLab, client: Any, image: str) -> None:
    from docker.types import Resources

    cpus = client.info()["NCPU"]
    service = _job(client, image, ["true"],
                   resources=Resources(cpu_reservation=(cpus + 1) * 10**9))
    task = _until(lambda: (t := _task(service)) and t["Status"].get("Err") and t, 30)
    time.sleep(3)  # still queued a while later
    task = _task(service)
    assert task is not None
    # A job's desired state is "complete" from the start, whatever its task's state.
    assert (task["Status"]["State"], task["DesiredState"]) == ("pending", "complete")
    assert "no suitable node" in task["Status"]["Err"]
    assert "insufficient resources" in task["Status"]["Err"]
    print(f"\nqueued: {task['Status']['State']} {task['Status']['Err']!r}")


def test_a_secret_arrives_with_its_uid_gid_and_mode(client: Any, image: str) -> None:
    from docker.types import SecretReference

    secret = client.secrets.create(name=_name("secret"), data=b"s3cret-value")
    ref = SecretReference(secret.id, secret.name, filename="token", uid="23456",
                          gid="23457", mode=0o400)
    service = _job(client, image,
                   ["sh", "-c", "stat -c '%a %u %g' /run/secrets/token; cat /run/secrets/token"],
                   secrets=[ref], user="23456:23457")
    task = _ended(service)
    logs = _logs(service)
    assert task["Status"]["State"] == "complete", logs
    assert logs.split() == ["400", "23456", "23457", "s3cret-value"]


def test_a_killed_worker_goes_down_and_its_task_is_left(swarm: SwarmLab, client: Any,
                                                        image: str) -> None:
    doomed = swarm.add_worker()
    service = _job(client, image, ["sleep", "600"],
                   constraints=[f"node.id=={swarm.node_id(doomed)}"])
    _until(lambda: (t := _task(service)) and t["Status"]["State"] == "running", 90)
    killed = time.monotonic()
    swarm.kill_node(doomed)
    seen: list[tuple[float, str, str, str]] = []

    def observe() -> bool:
        node = client.nodes.get(swarm.node_id(doomed)).attrs["Status"]["State"]
        task = _task(service)
        assert task is not None
        row = (round(time.monotonic() - killed, 1), node, task["Status"]["State"],
               task["DesiredState"])
        if not seen or seen[-1][1:] != row[1:]:
            seen.append(row)
        return node == "down"

    _until(observe, 60, step=0.5)
    down = seen[-1][0]
    after = time.monotonic() + 20
    while time.monotonic() < after:  # what the task's state does once the node is down
        observe()
        time.sleep(1)
    print(f"\nafter kill_node (seconds, node, task state, desired): {seen}")
    # Heartbeats stop: the manager marks the node down within about 10-15 s ...
    assert 3 < down < 30
    # ... and the job's task stays "running" in its view (nothing reports its end, no other
    # node takes it up): the backend must look at the node's state to call a run lost.
    assert seen[-1][1:] == ("down", "running", "complete")
    assert len(service.tasks()) == 1


def test_a_removed_job_leaves_its_task_and_its_container(swarm: SwarmLab, client: Any,
                                                         image: str) -> None:
    """Debian's 20.10 (moby/moby#42789, #44312): the manager keeps a removed replicated-job's
    task and the worker its exited container (a task history limit of 0 does not change it);
    only the node's own API removes the container, and the task record stays even then."""
    service = _job(client, image, ["true"])
    task = _ended(service)
    node = swarm.engine_of(task["NodeID"])
    service.remove()
    time.sleep(10)
    kept = [t for t in client.api.tasks() if t["ID"] == task["ID"]]
    assert [t["Status"]["State"] for t in kept] == ["complete"]
    containers = node.client().api.containers(
        all=True, filters={"label": f"com.docker.swarm.task.id={task['ID']}"})
    assert [c["State"] for c in containers] == ["exited"]
    assert swarm.sweep() == [containers[0]["Names"][0].lstrip("/")]
    assert not node.client().api.containers(all=True)
    assert [t["ID"] for t in client.api.tasks() if t["ID"] == task["ID"]] == [task["ID"]]


def _stop(client: Any, service: Any) -> None:
    """Stop a job as ``stop`` must: its spec updated to no completions (the low-level call,
    as jobs refuse an update config), which shuts its running task down."""
    service.reload()
    spec = service.attrs["Spec"]
    client.api.update_service(
        service.id, service.attrs["Version"]["Index"], name=spec["Name"],
        labels=spec.get("Labels"), task_template=spec["TaskTemplate"],
        endpoint_spec=spec.get("EndpointSpec"),
        mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 0}})


def test_a_bare_job_and_stopping_a_running_one(swarm: SwarmLab, client: Any,
                                                image: str) -> None:
    """The benchmark's baseline (a one-replica job running ``true``, its image already on
    the node); removing a running job does not stop it (moby/moby#44312 again), updating it
    to no completions does, and its removal then leaves nothing; an ended job updated so
    still leaves its container and task."""
    _ended(_job(client, image, ["true"]))  # the image is on the node it lands on
    timings = []
    for _ in range(2):
        began = time.monotonic()
        task = _ended(_job(client, image, ["true"]))
        timings.append(time.monotonic() - began)
        assert task["Status"]["State"] == "complete"

    def running() -> tuple[Any, dict[str, Any], Callable[[], list[str]]]:
        service = _job(client, image, ["sleep", "600"], stop_grace_period=2 * 10**9)
        task = _until(lambda: (t := _task(service)) and t["Status"]["State"] == "running"
                      and t, 60)
        node = swarm.engine_of(task["NodeID"]).client().api
        label = {"label": f"com.docker.swarm.task.id={task['ID']}"}
        return service, task, lambda: [c["State"] for c in node.containers(all=True,
                                                                            filters=label)]

    def record(task: dict[str, Any]) -> tuple[str, str] | None:
        """The task's (state, desired state) in the manager's store; None once gone."""
        found = [t for t in client.api.tasks() if t["ID"] == task["ID"]]
        return (found[0]["Status"]["State"], found[0]["DesiredState"]) if found else None

    removed, removed_task, removed_states = running()
    removed.remove()
    time.sleep(10)
    assert removed_states() == ["running"]  # and it would run its 600 s
    assert record(removed_task) == ("running", "complete")

    stopped, stopped_task, stopped_states = running()
    began = time.monotonic()
    _stop(client, stopped)
    _until(lambda: stopped_states() == ["exited"], 30)
    seconds = time.monotonic() - began
    assert record(stopped_task) == ("shutdown", "remove")
    assert [t["ID"] for t in stopped.tasks()] == [stopped_task["ID"]]  # no new task
    stopped.remove()
    # Then removed with its service, container and task record both (unlike an ended job's).
    gone = _until(lambda: not stopped_states() and time.monotonic(), 30)
    assert not [t for t in client.api.tasks() if t["ID"] == stopped_task["ID"]]

    ended = _job(client, image, ["true"])
    ended_task = _ended(ended)
    ended_node = swarm.engine_of(ended_task["NodeID"]).client().api
    _stop(client, ended)
    time.sleep(2)
    ended.remove()
    time.sleep(5)
    ended_left = ([c["State"] for c in ended_node.containers(
        all=True, filters={"label": f"com.docker.swarm.task.id={ended_task['ID']}"})],
        record(ended_task))
    # An ended job is not cleaned so: its container and task stay (see sweep).
    assert ended_left == (["exited"], ("complete", "complete"))
    assert 1.5 < seconds < 20
    print(f"\nbare job create-to-complete: {', '.join(f'{t:.2f} s' for t in timings)}; "
          f"a removed running job still runs 10 s later; TotalCompletions 0 stopped one "
          f"(grace 2 s) in {seconds:.1f} s, container and task gone "
          f"{gone - began - seconds:.1f} s after its removal; an ended job updated so, "
          f"then removed, leaves (containers, task): {ended_left}")
