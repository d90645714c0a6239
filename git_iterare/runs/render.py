"""Turning records into the output of ``list`` and ``show``.

The JSON and porcelain formats of ``list`` are stable interfaces, documented in
gititerare-records(5): fields are never renamed or reordered; new ones are added at the end.
A run's object in ``list --format json`` is built by :func:`git_iterare.runs.index.list_item`
(the listing cache keeps it for runs that ended); this module only assembles and prints.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from git_iterare.agents.labels import REPORTED, disputed
from git_iterare.runs.index import CORRUPT, Entry, list_item, span
from git_iterare.runs.status import parse_iso
from git_iterare.ui import bounded_line, sanitize, sanitize_line, usd

if TYPE_CHECKING:
    from git_iterare.agents.values import Event
    from git_iterare.runs.record import RunRecord

#: Version of the ``list --format json`` document.
LIST_JSON_VERSION = 1
#: Columns of ``list --format porcelain`` (tab separated, ``-`` for none), in order.
PORCELAIN_FIELDS = ("id", "status", "agent", "created", "duration_s", "cost_usd", "branch",
                    "files", "insertions", "deletions")

STATUS_STYLES: dict[str, tuple[str, ...]] = {
    "created": ("dim",), "starting": ("cyan",), "running": ("blue", "bold"),
    "succeeded": ("green",), "failed": ("red",), "stopped": ("yellow",),
    "timed-out": ("red",), "lost": ("magenta",), "merged": ("green", "bold"),
    "cleaned": ("dim",), CORRUPT: ("red", "bold"),
}


def duration_seconds(record: RunRecord, now: _dt.datetime) -> float | None:
    """Seconds from ``started`` to ``finished`` (to ``now`` while active); None if unknown."""
    return span(record.status, record.started, record.finished, now)


def human_span(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``4d3h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def age_seconds(record: RunRecord, now: _dt.datetime) -> float | None:
    """Seconds since the run was created."""
    created = parse_iso(record.created)
    return max(0.0, (now - created).total_seconds()) if created else None


def changes_text(changes: dict[str, int] | None) -> str:
    """``3 files +10 -2`` or ``-``."""
    if not changes:
        return "-"
    files = changes.get("files", 0)
    return (f"{files} file{'s' if files != 1 else ''} "
            f"+{changes.get('insertions', 0)} -{changes.get('deletions', 0)}")


def cost_text(cost: float | None) -> str:
    """``$0.12`` (more decimals for less than ten cents, see :func:`git_iterare.ui.usd`)
    or ``-``."""
    return "-" if cost is None else usd(cost)


def disputed_reports(rec: RunRecord) -> int:
    """How many closing reports the run's log held when its figures are disputed
    (``extra.disputed``, see gititerare-records(5)), else 0."""
    found = rec.extra.get("disputed")
    reports = found.get("reports") if isinstance(found, dict) else None
    return reports if isinstance(reports, int) and not isinstance(reports, bool) \
        and reports > 1 else 0


#: Marks the cost of a run whose figures are disputed in ``list``.
DISPUTED_MARK = "?"


def spend_text(rec: RunRecord) -> str:
    """The run's cost against its budget (``$0.12/$1.00``), or :func:`cost_text` alone
    when it has no ``max_budget_usd``; :data:`DISPUTED_MARK` after the cost when its
    figures are disputed (:func:`disputed_reports`)."""
    cost = cost_text(rec.cost_usd) + (DISPUTED_MARK if disputed_reports(rec) else "")
    budget = rec.extra.get("max_budget_usd")
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0:
        return cost
    return f"{cost}/{usd(budget)}"


def list_json(entries: Iterable[Entry], now: _dt.datetime) -> str:
    """The ``list --format json`` document: ``{"v": 1, "runs": [item, ...]}``, on one line.

    Items of ended runs come ready-made from the cache; the result is the same text as
    ``json.dumps`` of the whole document.
    """
    items = []
    for entry in entries:
        if entry.item_json is None:  # an active run: its duration changes with ``now``
            import json

            items.append(json.dumps(list_item(entry, now), ensure_ascii=False))
        else:
            items.append(entry.item_json)
    return f'{{"v": {LIST_JSON_VERSION}, "runs": [' + ", ".join(items) + "]}"


def list_porcelain(entries: Iterable[Entry], now: _dt.datetime) -> str:
    """``list --format porcelain``: one tab-separated line per run, no header; tabs and
    newlines in values become spaces, other control characters are made visible."""
    lines = []
    for entry in entries:
        item = list_item(entry, now)
        changes = item["changes"] or {}
        values = {**item, "files": changes.get("files"),
                  "insertions": changes.get("insertions"), "deletions": changes.get("deletions")}
        lines.append("\t".join(_plain(values[k]) for k in PORCELAIN_FIELDS))
    return "".join(f"{line}\n" for line in lines)


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    return sanitize_line(str(value)).replace("^I", " ").replace("^J", " ")


#: The line under a table with a cost column (``COST*``).
COST_FOOTNOTE = f"* cost {REPORTED}"

#: Table columns: (header, right-aligned).
TABLE_COLUMNS = (("ID", False), ("STATUS", False), ("AGENT", False), ("AGE", True),
                 ("DURATION", True), ("COST*", True), ("BRANCH", False), ("CHANGES", False))


def aligned(columns: Sequence[tuple[str, bool]], rows: Sequence[list[str]],
            statuses: Sequence[str], status_column: int, paint: Any) -> list[str]:
    """A table's lines: the headers of ``columns`` (``(header, right-aligned)`` each), then
    ``rows`` (cells already sanitized), every column as wide as its widest cell, the cell
    of ``status_column`` colored by the row's status (:data:`STATUS_STYLES`)."""
    headers = [header for header, _ in columns]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def fmt(row: list[str], status: str | None) -> str:
        cells = []
        for i, (cell, (_, right)) in enumerate(zip(row, columns, strict=True)):
            text = cell.rjust(widths[i]) if right else cell.ljust(widths[i])
            if i == status_column and status is not None:
                text = paint(cell, *STATUS_STYLES.get(status, ())) + " " * (widths[i] - len(cell))
            cells.append(text)
        return "  ".join(cells).rstrip()

    return [fmt(headers, None)] + [fmt(r, s) for r, s in zip(rows, statuses, strict=True)]


def status_text(rec: RunRecord) -> str:
    """``list``'s status cell: the status with :func:`loop_text`, and for a swarm run
    the node its task runs or ran on (`` on node-2``), or ``queued`` while it waits for
    one (``extra.swarm`` without a node)."""
    from git_iterare.runs.status import ACTIVE

    text = rec.status + loop_text(rec)
    swarm = rec.extra.get("swarm")
    if not isinstance(swarm, dict):
        return text
    node = _swarm_node(swarm)
    if node:
        return f"{text} on {node}"
    return "queued" if rec.status in ACTIVE else text


def _swarm_node(swarm: Mapping[str, Any]) -> str:
    """The node a swarm run's ``extra.swarm`` names (its host name, else its id), or ""."""
    node = swarm.get("node") or swarm.get("node_id")
    return node if isinstance(node, str) else ""


def loop_text(rec: RunRecord) -> str:
    """What ``list`` adds to a loop's status: `` round 3/5`` while it runs, `` (stalled)``
    once it ended (its reason), nothing for a run of one round."""
    from git_iterare.runs.loops import REASONS, current_round, loop_of
    from git_iterare.runs.status import ACTIVE

    loop = loop_of(rec)
    if loop is None:
        return ""
    if rec.status in ACTIVE:
        return f" round {current_round(rec)}/{loop.get('max_rounds', '?')}"
    reason = loop.get("reason")
    return f" ({reason})" if isinstance(reason, str) and reason in REASONS else ""


def rounds_text(rec: RunRecord, paint: Any) -> list[str]:
    """The ``Rounds:`` part of ``show`` for a loop: its check and why it ended, then one
    line per round (the check's exit status and seconds, the round's cost, its head
    commit) with the last line of the check's output."""
    from git_iterare.runs.loops import REASONS, loop_of, rounds_of

    loop = loop_of(rec)
    if loop is None:
        return []
    rounds = rounds_of(rec)
    reason = loop.get("reason")
    why = f": {REASONS.get(str(reason), str(reason))}" if reason else ""
    lines = ["", paint("Rounds:", "bold") + sanitize_line(
        f" {len(rounds)} of at most {loop.get('max_rounds', '?')}{why}; the check: "
        f"{loop.get('until', '')}")]
    # A round that ran no check is the last: what ended the loop ended it.
    unchecked = REASONS.get(str(reason), "stopped") if reason not in (None, "passed",
                                                                      "rounds") else "stopped"
    for entry in rounds:
        check = entry.get("check_exit")
        seconds = entry.get("check_seconds")
        said = (f"check exited {check}" if check is not None else f"no check ({unchecked})") + (
            f" in {seconds:g} s" if isinstance(seconds, (int, float)) else "")
        cost = entry.get("cost_usd")
        head = entry.get("head")
        line = f"    {entry.get('round', '?')}  {said}" + (
            f", {cost_text(cost)}" if isinstance(cost, (int, float)) else "") + (
            f", head {str(head)[:12]}" if head else "")
        lines.append(sanitize_line(line))
        tail = (entry.get("check_tail") or "").strip().splitlines()
        if tail:
            lines.append("       " + sanitize_line(tail[-1]))
    return lines


def list_table(entries: Sequence[Entry], now: _dt.datetime, paint: Any) -> str:
    """The human table of ``list``; ``paint(text, *styles)`` colors the status.

    Every cell passes :func:`git_iterare.ui.sanitize_line` (records travel with fetch)."""
    rows: list[list[str]] = []
    statuses: list[str] = []
    for entry in entries:
        rec = entry.record
        if rec is None:
            rows.append([entry.run_id, CORRUPT, "-", "-", "-", "-", "-", entry.problem or ""])
            statuses.append(CORRUPT)
            continue
        rows.append([rec.id, status_text(rec), rec.agent or "-",
                     human_span(age_seconds(rec, now)),
                     human_span(duration_seconds(rec, now)), spend_text(rec),
                     rec.branch or "-", changes_text(rec.changes)])
        statuses.append(rec.status)
    rows = [[sanitize_line(str(cell)) for cell in row] for row in rows]
    lines = aligned(TABLE_COLUMNS, rows, statuses, 1, paint)
    if any(row[5] != "-" for row in rows):
        lines.append(COST_FOOTNOTE)
    if any(row[5].split("/")[0].endswith(DISPUTED_MARK) for row in rows):
        lines.append(f"{DISPUTED_MARK} disputed: the run's log holds more than one result "
                     "report (see `git iterare show`)")
    return "\n".join(lines) + "\n"


def blocked_domains(egress: dict[str, Any] | None) -> list[str]:
    """Names in ``egress["blocked"]`` (strings, or objects with ``"name"``), sorted, unique;
    at most :data:`~git_iterare.limits.MAX_EGRESS_NAMES` (a record may come from anyone),
    see :func:`blocked_more` for the rest."""
    from git_iterare.limits import MAX_DNS_NAME_CHARS, MAX_EGRESS_NAMES

    if not egress:
        return []
    names: set[str] = set()
    for item in egress.get("blocked") or []:
        if len(names) >= MAX_EGRESS_NAMES:
            break
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and name and len(name) <= MAX_DNS_NAME_CHARS:
            names.add(name)
    return sorted(names)


def refused_addresses(egress: dict[str, Any] | None) -> tuple[int, list[tuple[str, int]]]:
    """``(packets refused, [(address, packets)...])`` from ``egress["refused_connections"]``
    (``ipv4``, ``ipv6`` and ``addresses``, see gititerare-records(5)): the addresses that
    parse as IP addresses, sorted, at most :data:`~git_iterare.limits.MAX_EGRESS_NAMES`
    (a record may come from anyone); ``(0, [])`` when nothing was refused."""
    import ipaddress

    from git_iterare.limits import MAX_EGRESS_NAMES

    refused = (egress or {}).get("refused_connections")
    if not isinstance(refused, dict):
        return 0, []
    total = sum(n for n in (refused.get("ipv4"), refused.get("ipv6"))
                if isinstance(n, int) and not isinstance(n, bool) and n > 0)
    found = refused.get("addresses")
    addresses: list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]] = []
    for text, count in (found.items() if isinstance(found, dict) else ()):
        if len(addresses) >= MAX_EGRESS_NAMES:
            break
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            addresses.append((address, count))
    addresses.sort(key=lambda pair: (pair[0].version, pair[0]))
    return total, [(str(a), n) for a, n in addresses]


def blocked_more(egress: dict[str, Any] | None) -> int:
    """How many blocked names (or lookups, as the record counted them) are not in
    :func:`blocked_domains`: the record's ``more.blocked`` plus names over the cap."""
    if not egress:
        return 0
    listed = egress.get("blocked") or []
    more = egress.get("more")
    counted = more.get("blocked") if isinstance(more, dict) else 0
    over = max(0, len(listed) - len(blocked_domains(egress))) if isinstance(
        listed, (list, dict)) else 0
    return (counted if isinstance(counted, int) and counted > 0 else 0) + over


def log_summary(log: bytes, agent: str | None = None) -> tuple[int, str | None]:
    """``(number of lines, the agent's closing words or None)`` of a ``log.jsonl``.

    The closing words are what the agent that wrote the log (``agent``, a record's
    ``agent`` field; :func:`git_iterare.agents.for_record`) reports as its result
    (:attr:`~git_iterare.agents.base.RunResult.summary`), read from the last
    :data:`~git_iterare.limits.MAX_SUMMARY_EVENTS` lines only; None when it says nothing.
    Lines are counted without being copied.
    """
    from git_iterare.agents import for_record

    count = 0
    start = 0
    while start < len(log):
        end = log.find(b"\n", start)
        end = len(log) if end < 0 else end
        if log[start:end].strip():
            count += 1
        start = end + 1
    summary = for_record(agent).summarize(tail_events(log, agent)).summary
    return count, summary or None


def tail_events(log: bytes, agent: str | None = None) -> list[Event]:
    """The events of the last :data:`~git_iterare.limits.MAX_SUMMARY_EVENTS` lines of a
    ``log.jsonl``, as the agent that wrote it (``agent``, a record's ``agent`` field) reads
    them, oldest first; lines over :data:`~git_iterare.limits.MAX_LINE_BYTES` are skipped,
    and so are git-iterare's own (a round's start, what was dropped: the agent's that look
    like them were marked as the log was kept)."""
    from git_iterare.agents import for_record
    from git_iterare.limits import MAX_LINE_BYTES, MAX_SUMMARY_EVENTS
    from git_iterare.loglimit import OWN_PREFIX

    own = OWN_PREFIX.encode()
    tail: list[str] = []
    end = len(log)
    while end > 0 and len(tail) < MAX_SUMMARY_EVENTS:
        begin = log.rfind(b"\n", 0, end - 1) + 1 if end > 1 else 0
        raw = log[begin:end]
        end = begin
        if raw.strip() and len(raw) <= MAX_LINE_BYTES and not raw.startswith(own):
            tail.append(raw.decode("utf-8", "replace"))
    reader = for_record(agent)
    return [reader.parse_line(line) for line in reversed(tail)]


def engine_text(extra: Any) -> str | None:
    """The run's Docker engine as ``show`` prints it (``URL`` or ``URL (context NAME)``,
    for a swarm run ``swarm URL, node HOST``), from ``extra["engine"]`` and
    ``extra["swarm"]`` (see :func:`git_iterare.runner.ownership.origin`); None when
    the record has none."""
    engine = extra.get("engine") if isinstance(extra, dict) else None
    if not isinstance(engine, dict) or not isinstance(engine.get("url"), str):
        return None
    name = engine.get("name")
    text = str(engine["url"])
    if isinstance(name, str) and name and name != "default":
        text = f"{text} (context {name})"
    swarm = extra.get("swarm")
    if isinstance(swarm, dict):  # a swarm run: its manager, and the node it ran on
        node = _swarm_node(swarm)
        text = f"swarm {text}" + (f", node {node}" if node else "")
        for key, said in (("waiting", "queued"), ("error", "refused")):
            reason = swarm.get(key)
            if isinstance(reason, str) and reason:
                text += f", {said}: {reason}"
    return text


def _not_committed(skipped: Any, paint: Any) -> list[str]:
    """``show``'s lines for the record's ``extra.skipped`` (paths the automatic commit left
    out, :func:`git_iterare.runner.finish._note_skipped`): none when there are none."""
    if not isinstance(skipped, dict) or not isinstance(skipped.get("paths"), list):
        return []
    lines = ["", paint("Not committed:", "bold") + " left in the run's worktree by its "
             "automatic commit"]
    for item in skipped["paths"]:
        if isinstance(item, dict):
            lines.append(f"    {sanitize_line(str(item.get('path', '')))}  "
                         f"({sanitize_line(str(item.get('reason', '')))})")
    more = skipped.get("more")
    if isinstance(more, int) and more > 0:
        lines.append(f"    and {more} more (lists are capped at MAX_SKIPPED_NAMED)")
    return lines if len(lines) > 2 else []


def recorded_warnings(rec: RunRecord) -> list[str]:
    """The record's ``extra.warnings`` (how the agent's commits came back, kept by
    :func:`git_iterare.runner.finish._note_history`), each made one line; the first
    :data:`MAX_WARNINGS_SHOWN` of them (a fetched record may hold anything)."""
    found = rec.extra.get("warnings")
    kept = [bounded_line(w) for w in found if isinstance(w, str)][:MAX_WARNINGS_SHOWN] \
        if isinstance(found, list) else []
    return kept + _check_warning(rec)


def _check_warning(rec: RunRecord) -> list[str]:
    """A loop whose last check did not pass: a line saying so (``show`` and ``merge``)."""
    from git_iterare.runs.loops import REASONS, loop_of, rounds_of
    from git_iterare.runs.status import ACTIVE

    loop, rounds = loop_of(rec), rounds_of(rec)
    if loop is None or rec.status in ACTIVE or not rounds:
        return []
    last = rounds[-1]
    if last.get("check_exit") == 0:
        return []
    why = REASONS.get(str(loop.get("reason")), "it ended")
    said = (f"did not run (the loop: {why})" if last.get("check_exit") is None
            else f"failed (exit status {last.get('check_exit')})")
    return [bounded_line(f"its last check {said} after round {last.get('round')}: "
                         f"{loop.get('until')}")]


#: Most of a record's warnings shown.
MAX_WARNINGS_SHOWN = 10


#: Version of the ``show --format json`` document.
SHOW_JSON_VERSION = 1


@dataclass(frozen=True)
class Shown:
    """What ``git iterare show`` shows of one run, rendered by :func:`show_text` or
    :func:`show_json`.

    Attributes:
        record: the run's record.
        prompt: the exact prompt text its agent got (``prompt.md``).
        log: its ``log.jsonl``.
        diffstat: ``git diff --stat`` of base..head; None when the run has no result, a
            note when its commits are not in this repository.
        files: every file the run changed, as items with ``status`` (git's letter),
            ``path`` and ``reason`` (why it runs on the host, or None) attributes
            (:class:`git_iterare.git.hostexec.FileChange`); None when unknown.
        patch: ``git diff`` of base..head (bytes) when asked for (``-p``), else None.
    """

    record: RunRecord
    prompt: str
    log: bytes
    diffstat: str | None = None
    files: tuple[Any, ...] | None = None
    patch: bytes | None = None


def show_json(shown: Shown, now: _dt.datetime) -> str:
    """The ``show --format json`` document, on one line, ASCII only (gititerare-records(5)
    pins it: keys are never renamed or removed, new ones are added at the end)::

        {"v": 1, "run": <run.json>, "duration_s": 125.0, "prompt": "...",
         "log": {"lines": 12, "last_result": "..." | null},
         "files": [{"status": "A", "path": "x", "runs_on_host": "reason" | null}] | null,
         "patch": "diff --git ..." | null}

    ``run`` is the record as stored (``run.json``, its own ``"v"`` included); ``patch`` is
    null unless asked for; bytes of a path or patch that are not UTF-8 are ``\\udcXX``
    escapes.
    """
    import json

    count, last = log_summary(shown.log, shown.record.agent)
    files = None if shown.files is None else [
        {"status": f.status, "path": f.path, "runs_on_host": f.reason} for f in shown.files]
    duration = duration_seconds(shown.record, now)
    document = {
        "v": SHOW_JSON_VERSION,
        "run": shown.record.to_dict(),
        "duration_s": round(duration, 3) if duration is not None else None,
        "prompt": shown.prompt,
        "log": {"lines": count, "last_result": last},
        "files": files,
        "patch": None if shown.patch is None else shown.patch.decode("utf-8",
                                                                     "surrogateescape"),
    }
    return json.dumps(document, ensure_ascii=True)


#: Styles of a patch's lines, by how they start (as git diff colors them).
_PATCH_STYLES = (("diff --git ", ("bold",)), ("index ", ("bold",)), ("--- ", ("bold",)),
                 ("+++ ", ("bold",)), ("@@", ("cyan",)), ("+", ("green",)), ("-", ("red",)))


def patch_text(patch: bytes, paint: Any) -> str:
    """A patch (``git diff`` output, bytes) as ``show -p`` prints it: every line passed
    through :func:`git_iterare.ui.sanitize` (the agent wrote the files), colored as git
    colors a diff."""
    lines = []
    for line in sanitize(patch.decode("utf-8", "surrogateescape")).splitlines():
        styles = next((s for start, s in _PATCH_STYLES if line.startswith(start)), ())
        lines.append(paint(line, *styles) if styles else line)
    return "".join(f"{line}\n" for line in lines)


def show_text(shown: Shown, now: _dt.datetime, paint: Any) -> str:
    """The text of ``git iterare show`` (with ``-p``, the patch at its end).

    Every value from the record, the prompt, the log and git's diffstat passes
    :func:`git_iterare.ui.sanitize_line` (or :func:`~git_iterare.ui.sanitize` for text of
    several lines) before it is colored: records travel with fetch and push, and the agent
    writes its log. Cost, tokens, turns and the last result are labelled as reported by the
    agent.
    """
    import json

    rec, prompt, log, diffstat, patch = (shown.record, shown.prompt, shown.log,
                                         shown.diffstat, shown.patch)
    out: list[str] = []

    def field(label: str, value: Any, *styles: str, note: str = "") -> None:
        if value not in (None, "", {}, []):
            out.append(f"{label + ':':<11}{paint(sanitize_line(str(value)), *styles)}{note}")

    field("run", rec.id, "bold")
    field("status", rec.status, *STATUS_STYLES.get(rec.status, ()),
          note=f" (exit {rec.exit_code})" if rec.exit_code is not None else "")
    field("prompt", f"{rec.prompt_name or '-'}" + (f" ({rec.prompt_path})" if rec.prompt_path
                                                   else ""))
    field("agent", rec.agent)
    field("image", (rec.image or "") + (f" ({rec.image_digest})" if rec.image_digest else ""))
    field("branch", rec.branch)
    field("base", " ".join(str(x) for x in (rec.base_branch, rec.base_commit) if x))
    field("head", rec.head)
    field("created", rec.created)
    field("started", rec.started)
    field("finished", rec.finished)
    duration = duration_seconds(rec, now)
    field("duration", human_span(duration) if duration is not None else None)
    reports = disputed_reports(rec)
    reported = f" {disputed(reports) if reports else REPORTED}"
    budget, max_turns = rec.extra.get("max_budget_usd"), rec.extra.get("max_turns")
    of_budget = f" of {usd(budget)} budget" if isinstance(budget, (int, float)) and budget else ""
    field("cost", (cost_text(rec.cost_usd) + of_budget if rec.cost_usd is not None
                   else f"-{of_budget}" if of_budget else None), note=reported)
    field("tokens", ", ".join(f"{k} {v}" for k, v in rec.tokens.items()), note=reported)
    of_turns = f" of {max_turns}" if isinstance(max_turns, int) and max_turns else ""
    field("turns", (f"{rec.turns}{of_turns}" if rec.turns is not None
                    else f"- of {max_turns}" if of_turns else None), note=reported)
    field("engine", engine_text(rec.extra))
    field("container", rec.container)
    field("worktree", rec.worktree)
    field("changes", changes_text(rec.changes) if rec.changes else None)
    field("policy", json.dumps(rec.policy, sort_keys=True) if rec.policy else None)
    field("extra", json.dumps(rec.extra, sort_keys=True) if rec.extra else None)
    field("error", rec.error, "red")
    for line in recorded_warnings(rec):
        field("warning", line, "yellow")
    out.append("")
    out.append(paint("Prompt:", "bold"))
    out.extend(f"    {line}" for line in sanitize(prompt).splitlines())
    out.append("")
    count, last = log_summary(log, rec.agent)
    out.append(paint("Log:", "bold") + f" {count} line{'s' if count != 1 else ''}")
    if last is not None:
        out.append(f"    last result {REPORTED}: {sanitize_line(last)}")
    out.extend(rounds_text(rec, paint))
    if diffstat is not None:
        out.append("")
        span_text = sanitize_line(f"{(rec.base_commit or '')[:12]}..{(rec.head or '')[:12]}")
        stat = sanitize(diffstat).rstrip("\n").splitlines()
        out.append(paint(f"Changes ({span_text}):", "bold") + ("" if stat else " none"))
        out.extend(f"   {line}" for line in stat)
    out.extend(_not_committed(rec.extra.get("skipped"), paint))
    blocked = blocked_domains(rec.egress)
    if blocked:
        out.append("")
        out.append(paint("Blocked egress:", "bold") + " to allow a name, add its line to "
                   "allowed_domains under [firewall] in .iterare/config.toml")
        visible = [sanitize_line(name) for name in blocked]
        width = max(len(name) for name in visible)
        for name, text in zip(blocked, visible, strict=True):
            out.append(f"    {text:<{width}}  {json.dumps(name)},")
        more = blocked_more(rec.egress)
        if more:
            out.append(f"    and {more} more (lists are capped at MAX_EGRESS_NAMES)")
    out.extend(_refused(rec.egress, paint))
    text = "\n".join(out) + "\n"
    if patch:
        text += "\n" + patch_text(patch, paint)
    return text


def _refused(egress: dict[str, Any] | None, paint: Any) -> list[str]:
    """``show``'s lines about the connections the firewall refused: each address with the
    ``allowed_cidrs`` line that allows it; none when nothing was refused."""
    import json

    total, addresses = refused_addresses(egress)
    if not total and not addresses:
        return []
    packets = f"{total} packet{'s' if total != 1 else ''}"
    out = ["", paint("Refused connections:", "bold") + f" {packets}; to allow an address, add "
           "its line to allowed_cidrs under [firewall] in .iterare/config.toml"]
    width = max((len(a) for a, _ in addresses), default=0)
    for address, count in addresses:
        cidr = f"{address}/{128 if ':' in address else 32}"
        out.append(f"    {address:<{width}}  {json.dumps(cidr)},  # {count} "
                   f"packet{'s' if count != 1 else ''}")
    if not addresses:
        out.append("    (the sandbox recorded no addresses)")
    return out
