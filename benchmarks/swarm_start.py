"""Start cost of a run on a Docker Swarm (the client talks to the manager alone).

For a repository of about ``--mb`` MB (incompressible files, as in
:mod:`benchmarks.remote_start`), the wall time of the SECOND ``git iterare execute`` (after
a commit changing one small file: the manager's object cache has the rest) from the
command's start until the agent's first instruction ran on a node, as a ratio to a bare
one-replica service running ``true`` on the same swarm (from its creation until its task
is ``complete``), measured in the same run, beside each run; goal: ratio <= 3.0. After
the first run a global service of the image runs once on every worker, so that no second
run (nor baseline) is timed with the image's pull.

Where the second run's time goes is printed from the phases :mod:`git_iterare.timings`
records (``start.fill`` ships the code, ``start.swarm.*`` are the backend's steps), and
from the manager's API, polled while the run starts: when its service appeared, when its
task was given a node, and when it ran (the task's command fetches the trees, then starts
the agent).

The swarm is ``DOCKER_HOST`` when it names a remote engine (a manager; ``--registry`` is
then its registry, and the clocks must agree with this machine's); otherwise a lab of
``--workers`` workers from ``tests/swarm.py`` is started and removed at the end, and the
image is copied into its manager. Usage::

    python -m benchmarks.swarm_start [--image git-iterare:latest] [--mb 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import precompile, report
from benchmarks.remote_start import _git, make_repo, run_once

#: The agent's placement: never the manager (it holds each run's egress and tree server).
CONSTRAINTS = ["node.role==worker"]
#: The bare services' names begin so (a run's are ``iterare-<run id>``).
BARE_PREFIX = "bare-true-"
#: How often the manager is asked about services and tasks while a run starts, in seconds.
POLL = 0.1


@contextmanager
def swarm(image: str, registry: str, workers: int) -> Iterator[tuple[dict[str, str], str]]:
    """The environment naming the swarm's manager, and its registry (see the module
    docstring)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        if not registry:
            raise SystemExit("--registry is needed with a DOCKER_HOST of a swarm's manager")
        yield {}, registry
        return
    from tests import swarm as lab_module

    seed = Path(tempfile.mkdtemp(prefix="iterare-bench-swarm-"))
    seed.rmdir()  # start_lab makes it
    lab = lab_module.start_lab(seed, workers=workers)
    try:
        print(f"swarm lab: manager + {len(lab.workers)} workers up in "
              f"{lab.startup_seconds:.0f} s")
        started = time.monotonic()
        lab.manager.load_image(image)
        print(f"image copied into the manager in {time.monotonic() - started:.0f} s")
        yield lab.manager.tls_env(), lab.registry
    finally:
        lab.remove()
        for folder in [seed, *seed.parent.glob(f"{seed.name}-*")]:  # each node's copy
            shutil.rmtree(folder, ignore_errors=True)


def api(env: dict[str, str]) -> Any:
    """A low-level Docker client of the manager ``env`` names (``DOCKER_HOST``,
    ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``; these of this process when empty), as
    git-iterare connects to it (its CA, whatever ``REQUESTS_CA_BUNDLE`` says)."""
    from git_iterare.sandbox.engine import TLS, Engine
    from git_iterare.sandbox.engine_client import client

    env = {**os.environ, **env}
    certs = Path(env.get("DOCKER_CERT_PATH", Path.home() / ".docker"))
    tls = TLS(True, str(certs / "ca.pem"), str(certs / "cert.pem"), str(certs / "key.pem")) \
        if env.get("DOCKER_TLS_VERIFY") else None
    return client(Engine("swarm-bench", env["DOCKER_HOST"], tls)).api


class Watch:
    """Polls the manager, every :data:`POLL` s in a thread, for services and tasks:
    when each service was first seen, with its image, and when its task was first seen
    in each state (wall-clock seconds, ``time.time()``)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.services: dict[str, tuple[float, str]] = {}
        self.states: dict[str, dict[str, float]] = {}
        self.failed = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _poll(self) -> None:
        names: dict[str, str] = {}
        while not self._done.is_set():
            now = time.time()
            try:
                for service in self.manager.services():
                    name = service["Spec"]["Name"]
                    names[service["ID"]] = name
                    self.services.setdefault(name, (now, service["Spec"]["TaskTemplate"]
                                                    ["ContainerSpec"]["Image"]))
                for task in self.manager.tasks():
                    name = names.get(task["ServiceID"], "")
                    self.states.setdefault(name, {}).setdefault(task["Status"]["State"], now)
            except Exception as exc:  # retried; the first one is shown
                if not self.failed:
                    print(f"watch: the manager did not answer: {exc}")
                self.failed += 1
            self._done.wait(POLL)


def bare_service(manager: Any, image: str, *, every_worker: bool = False) -> float:
    """Seconds from creating a one-replica service of ``image`` running ``true`` (kept to
    the workers, never restarted) until its task is ``complete``; it is removed after.
    With ``every_worker``, a global one instead, until a task completed on each (after
    it, every worker has the image, so no run is timed with a pull).

    Raises:
        RuntimeError: a task ended otherwise, or not within 600 s.
    """
    name = f"{BARE_PREFIX}{os.urandom(4).hex()}"
    template = {"ContainerSpec": {"Image": image, "Command": ["true"]},
                "RestartPolicy": {"Condition": "none"},
                "Placement": {"Constraints": CONSTRAINTS}}
    start = time.perf_counter()
    workers = len(manager.nodes(filters={"role": "worker"})) if every_worker else 1
    made = manager.create_service(template, name=name, mode={"Global": {}} if every_worker
                                  else {"Replicated": {"Replicas": 1}},
                                  endpoint_spec={"Mode": "dnsrr"})
    try:
        while time.perf_counter() - start < 600:
            states = [t["Status"]["State"] for t in manager.tasks(filters={"service": name})]
            if states.count("complete") >= workers:
                return time.perf_counter() - start
            if {"failed", "rejected", "shutdown"} & set(states):
                raise RuntimeError(f"the bare service's task ended {states}")
            time.sleep(POLL / 2)
        raise RuntimeError("the bare service did not complete within 600 s")
    finally:
        manager.remove_service(made["ID"])


def configure(home: Path, image: str, registry: str) -> None:
    """The user's own config under ``home``: ``image``, one CPU, runs on the swarm's
    workers."""
    config = home / ".config" / "iterare" / "config.toml"
    config.write_text(f'[docker]\nimage = "{image}"\ncpus = 1\n[swarm]\nenabled = true\n'
                      f'registry = "{registry}"\nconstraints = {CONSTRAINTS!r}\n'.replace(
                          "'", '"'))


#: The breakdown's lines: a label, and the phases (of :mod:`git_iterare.timings`) it sums;
#: in the backend's order (the service is created before the egress starts and the code
#: ships, see SwarmBackend.start).
PHASES = [
    ("execute's checks and plan", ("start.validate", "start.plan")),
    ("the run's trees made (volumes, records)", ("start.make",)),
    ("publish: push to the registry", ("start.swarm.publish",)),
    ("overlay network made", ("start.swarm.overlay",)),
    ("egress created, its launcher read", ("start.swarm.egress",)),
    ("agent's files (accounts, configs, secrets)", ("start.swarm.files",)),
    ("service created", ("start.swarm.service",)),
    ("egress started", ("start.swarm.egress-start",)),
    ("ship: code into the manager's volumes", ("start.fill",)),
    ("tree server started", ("start.swarm.tree-server",)),
    ("egress ready (firewall locked, self-check)", ("start.swarm.egress-ready",)),
]


def breakdown(timings: dict[str, list[float]], run_id: str, watch: Watch, began: float,
              agent: float) -> list[str]:
    """The lines of where one run's start went, in ms (see :data:`PHASES`): what
    ``execute`` timed, then the task's steps as the manager showed them."""
    lines = [f"  {label}: {sum(sum(timings.get(p, [])) for p in names) * 1000:.0f}"
             for label, names in PHASES]
    name = f"iterare-{run_id}"
    seen = watch.states.get(name, {})
    created = watch.services.get(name, (began, ""))[0]
    assigned = min((seen[s] for s in ("assigned", "accepted", "preparing", "starting",
                                      "running") if s in seen), default=created)
    running = seen.get("running", assigned)
    lines += [f"  service seen, after execute's start: {(created - began) * 1000:.0f}",
              f"  task scheduled (given a node): {(assigned - created) * 1000:.0f}",
              f"  task running (container started on the node): "
              f"{(running - assigned) * 1000:.0f}",
              f"  trees fetched, until the agent's first command: "
              f"{(began + agent - running) * 1000:.0f}"]
    return lines


def timed_run(repo: Path, env: dict[str, str], watch: Watch, folder: Path,
              n: int) -> tuple[float, list[str], str]:
    """One ``execute``: its seconds until the agent started, its breakdown lines, and the
    image reference its service ran."""
    from git_iterare import timings

    log = folder / f"timings-{n}.jsonl"
    began = time.time()
    seconds, _ = run_once(repo, {**env, timings.ENV: str(log)})
    runs = [s for s in watch.services if not s.startswith(BARE_PREFIX)]
    run_id = max(runs, key=lambda s: watch.services[s][0]).removeprefix("iterare-")
    lines = breakdown(timings.read(log), run_id, watch, began, seconds)
    return seconds, lines, watch.services[f"iterare-{run_id}"][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1,
                        help="workers of the lab started when DOCKER_HOST names no swarm")
    parser.add_argument("--registry", default="", help="the swarm's registry (HOST:PORT)")
    args = parser.parse_args()
    precompile()
    home = Path(tempfile.mkdtemp(prefix="iterare-bench-home-"))
    with swarm(args.image, args.registry, args.workers) as (engine_env, registry):
        env = {**os.environ, **engine_env, "HOME": str(home),
               "XDG_CONFIG_HOME": str(home / ".config")}
        repo = make_repo(args.image, args.mb, home)
        configure(home, args.image, registry)
        size = sum(p.stat().st_size for p in (repo / "data").rglob("*") if p.is_file())
        print(f"repository: {size / 1e6:.0f} MB in {args.mb * 10} files")
        manager = api(engine_env)
        first, second, baseline = [], [], []
        where: list[list[str]] = []
        with Watch(manager) as watch:
            for n in range(args.runs):
                subprocess.run(["git", "iterare", "cleanup", "--cache"], cwd=repo, env=env,
                               check=True, capture_output=True)
                seconds, _, image = timed_run(repo, env, watch, home, 2 * n)
                first.append(seconds)
                if n == 0:
                    pulled = bare_service(manager, image, every_worker=True)
                    print(f"the image pulled on every worker in {pulled:.0f} s")
                (repo / "data" / "changed.txt").write_text(f"change {n}\n" * 100)
                _git(repo, "add", "data/changed.txt")
                _git(repo, "commit", "-qm", f"change {n}")
                baseline.append(bare_service(manager, image))
                seconds, lines, image = timed_run(repo, env, watch, home, 2 * n + 1)
                second.append(seconds)
                where.append(lines)
                baseline.append(bare_service(manager, image))
        print(f"bare one-replica service (true), create to complete: "
              f"{statistics.median(baseline):.2f} s (median of {len(baseline)})")
        report("swarm execute until the agent starts, first run", first, baseline,
               goal=float("inf"))
        ratio = report("swarm execute until the agent starts, second run", second, baseline,
                       goal=3.0)
        print(f"where the second run's start goes (the last of {len(where)}, ms):")
        print("\n".join(where[-1]))
        subprocess.run(["git", "iterare", "cleanup", "-y", "--force", "--all"], cwd=repo,
                       env=env, check=False, capture_output=True)
        subprocess.run(["git", "iterare", "cleanup", "--cache"], cwd=repo, env=env,
                       check=False, capture_output=True)
        shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    if ratio > 3.0:
        raise SystemExit("second run over its goal")


if __name__ == "__main__":
    main()
