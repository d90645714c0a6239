"""What a sandbox tried to reach: read from the files its entrypoint leaves in the output dir.

* ``dns.log`` -- dnsmasq's query log (``log-queries=extra``): lines such as
  ``<date> dnsmasq[22]: 7 127.0.0.1/41234 query[A] example.org from 127.0.0.1`` and, for a
  name outside the allowlist, ``... 7 127.0.0.1/41234 config example.org is NXDOMAIN``
  (the leading number ties a query to its answer).
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
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The name the entrypoint's self-check looks up; not the agent's doing.
SELF_CHECK_NAME = "iterare-selfcheck.invalid"

_LINE = re.compile(r"dnsmasq\[\d+\]: (\d+) \S+ (\S+) (\S+)(?: (.*))?$")


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
    """

    allowed: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, int] = field(default_factory=dict)
    refused_connections: RefusedConnections = field(default_factory=RefusedConnections)
    status: dict[str, Any] = field(default_factory=dict)


def parse_dns_log(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """Count lookups per name in a dnsmasq ``log-queries=extra`` log.

    Returns:
        ``(allowed, blocked)``, each name -> count, names in lower case, the self-check's
        own lookup left out.
    """
    queries: dict[str, str] = {}
    refused: set[str] = set()
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        serial, verb, name, rest = m.group(1), m.group(2), m.group(3).lower(), m.group(4) or ""
        if verb.startswith("query["):
            queries[serial] = name
        elif verb == "config" and rest.startswith("is NXDOMAIN"):
            refused.add(f"{serial} {name}")
    allowed: Counter[str] = Counter()
    blocked: Counter[str] = Counter()
    for serial, name in queries.items():
        if name == SELF_CHECK_NAME:
            continue
        (blocked if f"{serial} {name}" in refused else allowed)[name] += 1
    return dict(allowed), dict(blocked)


def _address(text: str) -> str:
    """The kernel writes IPv6 addresses in full (``fd31:0007:0000:...``); compress them."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_egress_report(out_dir: Path | str) -> EgressReport:
    """Read the egress report of the sandbox whose output directory is ``out_dir``.

    Missing or unreadable files give empty parts rather than errors (a sandbox that was
    killed leaves no counters).
    """
    out = Path(out_dir)
    try:
        log = (out / "dns.log").read_text(errors="replace")
    except OSError:
        log = ""
    allowed, blocked = parse_dns_log(log)
    counters = _read_json(out / "refused.json").get("rejected_packets")
    refused = RefusedConnections()
    if isinstance(counters, dict):
        raw = _read_json(out / "refused.json").get("addresses")
        addresses = ({_address(str(k)): int(v) for k, v in raw.items() if isinstance(v, int)}
                     if isinstance(raw, dict) else {})
        refused = RefusedConnections(int(counters.get("ipv4", 0)), int(counters.get("ipv6", 0)),
                                     addresses, True)
    return EgressReport(allowed, blocked, refused, _read_json(out / "status.json"))
