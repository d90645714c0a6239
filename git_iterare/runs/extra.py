"""The keys of a run record's ``extra`` object, typed (gititerare-records(5)).

``extra`` stays a JSON object in ``run.json``, so records of every version read unchanged,
and keys this version does not know are kept as they are. Here each key git-iterare
writes has its type, grouped by who writes it. A record may come from someone else
(``git iterare fetch``) or be crafted: these are the shapes git-iterare writes, not a
promise about what a record holds, so readers still check values (``isinstance``)
before they act on them.
"""

from __future__ import annotations

from typing import TypedDict


class Engine(TypedDict):
    """The engine a run used: its docker context and endpoint (no key material)."""

    name: str
    url: str


class Spare(TypedDict):
    """A spare worktree on a remote engine that the run took over."""

    work: str
    git: str
    base: str


class Shipped(TypedDict, total=False):
    """What crossed the wire to a remote engine: pack and index bytes, objects in that
    pack, bytes of the other files; the initialized submodules checked out there
    (``[commit, path]``, none when missing)."""

    pack_bytes: int
    objects: int
    file_bytes: int
    submodules: list[list[str]]


class SwarmNode(TypedDict, total=False):
    """Where a swarm run's task ran: the node's host name and swarm node id (none while
    it is queued); while queued, the swarm's reason (``waiting``); the swarm's reason for
    refusing the task (``error``: an image the node cannot pull)."""

    node: str
    node_id: str
    waiting: str
    error: str


class Fetched(TypedDict):
    """What came back from a remote engine at the run's end: bytes read, and how its
    worktree came (``change``: the changed and new paths, ``deleted`` of them removed;
    ``whole``: the whole tree; ``none``: not at all)."""

    bytes: int
    worktree: str
    changed: int
    deleted: int


class Cached(TypedDict):
    """What a local run's start added to the repository's object cache (pack and index
    bytes, objects in those packs), and how many packs the objects it was given are in."""

    pack_bytes: int
    objects: int
    packs: int


class Unfinished(TypedDict):
    """Work the end of the run could not commit: the agent's outcome, its error, and why
    the commit failed (``git iterare finish`` clears it)."""

    outcome: str
    error: str | None
    reason: str


class SkippedPath(TypedDict):
    """A worktree path the automatic commit left out, and why."""

    path: str
    reason: str


class Skipped(TypedDict):
    """The paths the automatic commit left out (the first ones), and how many more."""

    paths: list[SkippedPath]
    more: int


class MergedAs(TypedDict):
    """The commit HEAD was at after the last merge, and where it merged."""

    commit: str
    host: str
    repo: str


class Disputed(TypedDict):
    """The agent's log held more than one result report."""

    reports: int


class Loop(TypedDict, total=False):
    """What ``execute --until`` asked of the run (``until``: the check, a shell command
    run in the sandbox after each round; ``max_rounds``; ``stall_after``: rounds of the
    same failing check output or an unchanged tree that end it), and why the loop ended
    (``reason``: ``passed``, ``rounds``, ``stalled``, ``budget``, ``stopped``,
    ``timed-out``, ``failed``, ``unchecked``), once it has; ``round``: the round under way
    (1 for the first); ``stalled``: what a stalled loop repeated; ``error``: why a
    ``failed`` one could not go on (the engine refused its check or next round)."""

    until: str
    max_rounds: int
    stall_after: int
    reason: str
    round: int
    stalled: str
    error: str


class Round(TypedDict, total=False):
    """One round of a loop (``round``: 1 for the first): when its agent started and
    ended (ISO 8601 UTC), the agent's exit status, the check's exit status (None when it
    did not run: the round was stopped) and seconds, the tail of its output (its last
    :data:`~git_iterare.limits.MAX_CHECK_TAIL_BYTES`, sanitized), what the round cost
    (US dollars, tokens by kind, turns, as the agent reported them: the round's own, see
    :func:`git_iterare.runner.rounds.own_share`), the agent's session when it reported
    that session's running cost (``session``), and the round's head commit (hex; the
    run's branch after it)."""

    round: int
    started: str
    ended: str
    exit_code: int | None
    check_exit: int | None
    check_seconds: float
    check_tail: str
    cost_usd: float | None
    tokens: dict[str, int]
    turns: int | None
    session: str
    head: str | None


class RunExtra(TypedDict, total=False):
    """A run record's ``extra``: every key is optional.

    What ``execute`` gave the run: ``timeout`` (seconds, 0: none), ``max_budget_usd``
    and ``max_turns`` (None: none), ``env`` (the names of the variables passed in),
    ``interactive``, ``networks``, ``workspace_mounts`` (mount points below the
    worktree), ``sidecar_image`` (git-iterare's own image id).

    Where it runs: ``host`` (machine id), ``repo`` (main worktree), ``engine``; on a
    swarm, ``swarm`` (the node its task ran on).

    How it was started: ``sidecar`` (``spare``, ``own``; ``ahead`` in older records),
    ``spare``, ``shipped``, ``cached``; ``engine_cleared`` once nothing of it is left on a
    remote engine.

    How it ended: ``fetched`` (from a remote engine), ``timed_out``, ``stop_requested``,
    ``budget_exceeded``,
    ``stop_reason`` (``budget``), ``unfinished``, ``skipped``, ``disputed``, ``warnings``
    (lines about how the agent's commits came back, repeated by ``show`` and ``merge``).

    A loop (``execute --until``): ``loop``, ``rounds``. One of several attempts at the
    same prompt (``execute -n``): ``group`` (the group's id), ``attempt`` (1 for the
    first).

    After: ``merged_as``. An import of iterare's: ``legacy``.
    """

    timeout: int
    max_budget_usd: float | None
    max_turns: int | None
    env: list[str]
    interactive: bool
    networks: list[str]
    workspace_mounts: list[str]
    sidecar_image: str
    host: str
    repo: str
    engine: Engine
    swarm: SwarmNode
    sidecar: str
    spare: Spare
    shipped: Shipped
    cached: Cached
    engine_cleared: bool
    fetched: Fetched
    timed_out: bool
    stop_requested: bool
    budget_exceeded: bool
    stop_reason: str
    unfinished: Unfinished
    skipped: Skipped
    disputed: Disputed
    warnings: list[str]
    loop: Loop
    rounds: list[Round]
    group: str
    attempt: int
    merged_as: MergedAs
    legacy: dict[str, object]
