"""What a sandbox tried to reach: read from the files its entrypoint leaves in the output dir.

* ``dns.log`` -- dnsmasq's query log (``log-queries=extra``): lines such as
  ``<date> dnsmasq[22]: 7 127.0.0.1/41234 query[A] example.org from 127.0.0.1``, then
  ``... 7 127.0.0.1/41234 forwarded example.org to 10.0.0.2`` (or ``reply``/``cached ...
  is ADDRESS``) and, for a name outside the allowlist, ``... 7 127.0.0.1/41234 config
  example.org is NXDOMAIN`` (the leading number ties a query to its answer).
* ``refused.json`` -- ``{"v": 1, "rejected_packets": {"ipv4": N, "ipv6": N},
  "addresses": {"10.0.0.7": N, ...}}``: packets the firewall's REJECT rules refused while
  the agent ran, and per destination address the packets refused (from the kernel's
  ``xt_recent`` lists: at most 100 addresses, each counted up to 20). Written when the
  agent exits.
* ``status.json`` -- the entrypoint's start-up result and self-checks.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_iterare import boundedfs
from git_iterare import limits as lim
from git_iterare.errors import OperationFailed

#: The name the entrypoint's self-check looks up; not the agent's doing.
SELF_CHECK_NAME = "iterare-selfcheck.invalid"

#: A query-log line: its serial, the client, and what dnsmasq says of the query. The name
#: inside ``what`` can hold any byte but a dot within a label (dnsmasq writes
#: ``<name unprintable>`` for names with control characters, but spaces pass as they are),
#: so it is cut out by the words around it, never by white space.
_LINE = re.compile(r"dnsmasq\[\d+\]: (\d+) \S+ (.*)$")
#: What a query line says: ``query[TYPE] NAME from CLIENT``.
_QUERY = re.compile(r"query\[[^\]]*\] (.*) from \S+$")
#: The words after the name on a line that says the query was forwarded upstream or
#: answered (from upstream, or from the cache), and on the line of a refused name.
_ANSWERED = (("forwarded ", " to "), ("reply ", " is "), ("cached ", " is "))
_REFUSED = ("config ", " is NXDOMAIN")


@dataclass(frozen=True)
class RefusedConnections:
    """Packets refused by the firewall while the agent ran.

    Attributes:
        ipv4: refused IPv4 packets.
        ipv6: refused IPv6 packets.
        addresses: destination address -> refused packets (each counted up to 20; at
            most 100 addresses kept, the least recent dropped first).
        recorded: False when the sandbox did not write the counters (killed, still running).
    """

    ipv4: int = 0
    ipv6: int = 0
    addresses: dict[str, int] = field(default_factory=dict)
    recorded: bool = False

    @property
    def total(self) -> int:
        return self.ipv4 + self.ipv6


@dataclass(frozen=True)
class EgressReport:
    """Names looked up and connections refused in one sandbox.

    Attributes:
        allowed: name -> number of lookups the resolver forwarded or answered from cache.
        blocked: name -> number of lookups answered NXDOMAIN because the name is not
            allowlisted.
        refused_connections: counters of refused packets.
        status: the entrypoint's ``status.json`` (empty when missing).
        more_allowed: lookups of allowed names not listed in ``allowed`` (over
            :data:`~git_iterare.limits.MAX_EGRESS_NAMES` names).
        more_blocked: the same for ``blocked``.
        log_truncated: the resolver's log was longer than
            :data:`~git_iterare.limits.MAX_DNS_LOG_BYTES`; the rest was not counted.
    """

    allowed: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, int] = field(default_factory=dict)
    refused_connections: RefusedConnections = field(default_factory=RefusedConnections)
    status: dict[str, Any] = field(default_factory=dict)
    more_allowed: int = 0
    more_blocked: int = 0
    log_truncated: bool = False


@dataclass(frozen=True)
class DnsCounts:
    """Lookups per name from a resolver log, bounded (see :mod:`git_iterare.limits`).

    Attributes:
        allowed: name -> lookups forwarded or answered (at most
            :data:`~git_iterare.limits.MAX_EGRESS_NAMES` names, the first seen).
        blocked: name -> lookups answered NXDOMAIN (same bound).
        more_allowed: lookups of allowed names beyond those listed.
        more_blocked: lookups of blocked names beyond those listed.
        truncated: the log was longer than :data:`~git_iterare.limits.MAX_DNS_LOG_BYTES`;
            its rest was not counted.
    """

    allowed: dict[str, int]
    blocked: dict[str, int]
    more_allowed: int = 0
    more_blocked: int = 0
    truncated: bool = False


#: Queries waiting for their answer line, at most (the answer follows within a few lines).
_PENDING = 4096


def _clip_name(name: str) -> str:
    if len(name) <= lim.MAX_DNS_NAME_CHARS:
        return name
    return name[:lim.MAX_DNS_NAME_CHARS - 3] + "..."


def count_dns_lookups(lines: Iterable[str]) -> DnsCounts:
    """Count lookups per name in dnsmasq ``log-queries=extra`` lines, in bounded memory.

    A query counts as allowed only from a line saying that it was forwarded upstream or
    answered (``forwarded``, ``reply``, ``cached``), as blocked from the line refusing it
    (``config NAME is NXDOMAIN``); a query with neither is not counted. The name is the
    one the query line gives, whatever bytes it holds (spaces included): a later line
    counts for it only when it names exactly that query. Names are lower case, cut to
    :data:`~git_iterare.limits.MAX_DNS_NAME_CHARS`; the self-check's own lookup is left
    out. Each list keeps its first :data:`~git_iterare.limits.MAX_EGRESS_NAMES` names;
    lookups of others are counted.
    """
    pending: OrderedDict[str, str] = OrderedDict()  # serial -> name (lower case)
    allowed: dict[str, int] = {}
    blocked: dict[str, int] = {}
    more = {"allowed": 0, "blocked": 0}

    def add(table: dict[str, int], kind: str, name: str) -> None:
        if name in table or len(table) < lim.MAX_EGRESS_NAMES:
            table[name] = table.get(name, 0) + 1
        else:
            more[kind] += 1

    def says(what: str, name: str, before: str, after: str) -> bool:
        return what.startswith(before + name) and what[len(before) + len(name):].startswith(
            after)

    for line in lines:
        m = _LINE.search(line.rstrip("\r\n"))
        if not m:
            continue
        serial, what = m.group(1), m.group(2)
        query = _QUERY.fullmatch(what)
        if query:
            name = query.group(1).lower()
            if name != SELF_CHECK_NAME:
                pending[serial] = name
                pending.move_to_end(serial)
                if len(pending) > _PENDING:
                    pending.popitem(last=False)
            continue
        name = pending.get(serial)
        if name is None:
            continue  # answered already, or a line we do not count (a CNAME's target)
        lowered = what.lower()
        if any(says(lowered, name, before, after) for before, after in _ANSWERED):
            add(allowed, "allowed", _clip_name(name))
        elif says(lowered, name, *(p.lower() for p in _REFUSED)):
            add(blocked, "blocked", _clip_name(name))
        else:
            continue
        del pending[serial]  # one count per query, however many lines follow
    return DnsCounts(allowed, blocked, more["allowed"], more["blocked"])


def parse_dns_log(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """Count lookups per name in a dnsmasq ``log-queries=extra`` log.

    Returns:
        ``(allowed, blocked)``, each name -> count, names in lower case, the self-check's
        own lookup left out; see :func:`count_dns_lookups` for the bounds.
    """
    counts = count_dns_lookups(text.splitlines())
    return counts.allowed, counts.blocked


def _dns_lines(path: Path, state: dict[str, bool]) -> Iterator[str]:
    """Lines of the resolver log at ``path``: a regular file only, never blocking, at most
    :data:`~git_iterare.limits.MAX_DNS_LOG_BYTES` read, lines longer than
    :data:`~git_iterare.limits.MAX_LINE_BYTES` skipped. Sets ``state["truncated"]``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        left = lim.MAX_DNS_LOG_BYTES
        while left > 0:
            line = f.readline(min(left, lim.MAX_LINE_BYTES + 1))
            if not line:
                return
            left -= len(line)
            if not line.endswith(b"\n") and len(line) > lim.MAX_LINE_BYTES:
                while line and not line.endswith(b"\n") and left > 0:  # skip the rest
                    line = f.readline(min(left, lim.MAX_LINE_BYTES))
                    left -= len(line)
                continue
            yield line.decode("utf-8", "replace")
        state["truncated"] = bool(f.read(1))


def _address(text: str) -> str:
    """The kernel writes IPv6 addresses in full (``fd31:0007:0000:...``); compress them."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _read_json(path: Path) -> dict[str, Any]:
    """``path`` parsed as a JSON object; {} when it is missing, not a regular file, larger
    than :data:`~git_iterare.limits.MAX_REPORT_BYTES` or not a JSON object."""
    try:
        data = json.loads(boundedfs.read_regular(path, lim.MAX_REPORT_BYTES))
    except (OSError, ValueError, OperationFailed):
        return {}
    return data if isinstance(data, dict) else {}


def read_egress_report(out_dir: Path | str) -> EgressReport:
    """Read the egress report of the sandbox whose output directory is ``out_dir``.

    Missing or unreadable files give empty parts rather than errors (a sandbox that was
    killed leaves no counters).
    """
    out = Path(out_dir)
    state = {"truncated": False}
    counts = count_dns_lookups(_dns_lines(out / "dns.log", state))
    refused_data = _read_json(out / "refused.json")
    counters = refused_data.get("rejected_packets")
    refused = RefusedConnections()
    if isinstance(counters, dict):
        raw = refused_data.get("addresses")
        addresses: dict[str, int] = {}
        for key, value in (raw.items() if isinstance(raw, dict) else ()):
            if len(addresses) >= lim.MAX_EGRESS_NAMES:
                break
            if isinstance(value, int) and len(str(key)) <= lim.MAX_DNS_NAME_CHARS:
                addresses[_address(str(key))] = value
        refused = RefusedConnections(_count(counters.get("ipv4")), _count(counters.get("ipv6")),
                                     addresses, True)
    return EgressReport(counts.allowed, counts.blocked, refused, _read_json(out / "status.json"),
                        more_allowed=counts.more_allowed, more_blocked=counts.more_blocked,
                        log_truncated=state["truncated"])


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def drop_dns_log(out_dir: Path | str) -> bool:
    """Delete the resolver's log (``dns.log``) of the sandbox whose output directory is
    ``out_dir``, once :func:`read_egress_report` has counted it: it holds every name the
    agent looked up in plain text (a secret used as a DNS name too), and the record keeps
    the counts, redacted.

    Returns:
        False when it is there and could not be deleted (a folder not the user's yet).
    """
    try:
        os.unlink(Path(out_dir) / "dns.log")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
