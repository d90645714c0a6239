"""What the sandbox needs to know of the engine's host network: the DNS servers Docker
would use, and the host's own addresses, which no sandbox may reach.

Read on the machine git-iterare runs on, which is the engine's host for a local engine
(the usual case); for a remote engine its addresses come from its name, and its DNS
servers from ``[docker] dns``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
from pathlib import Path

from git_iterare.sandbox.spec import SandboxSpec


def host_dns_servers(resolv_conf: Path = Path("/etc/resolv.conf"),
                     resolved_conf: Path = Path("/run/systemd/resolve/resolv.conf")
                     ) -> tuple[str, ...]:
    """The host's DNS servers, as Docker picks them for its default bridge.

    Read on the machine git-iterare runs on, which is the engine's host for a local engine
    (the usual case); with a remote ``DOCKER_HOST``, set ``[docker] dns``.

    Loopback servers are left out (they are not reachable from a container); when only
    systemd-resolved's stub (127.0.0.53) is listed, its upstream file is read instead.

    Returns:
        Addresses in file order; empty when none is found.
    """
    def servers(path: Path) -> list[str]:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                try:
                    found.append(ipaddress.ip_address(parts[1].split("%")[0]))
                except ValueError:
                    continue
        return [str(a) for a in found]

    listed = servers(resolv_conf)
    usable = [a for a in listed if not ipaddress.ip_address(a).is_loopback]
    if not usable and "127.0.0.53" in listed:
        usable = [a for a in servers(resolved_conf)
                  if not ipaddress.ip_address(a).is_loopback]
    return tuple(dict.fromkeys(usable))


def host_addresses(fib_trie: Path = Path("/proc/net/fib_trie"),
                   if_inet6: Path = Path("/proc/net/if_inet6")) -> tuple[str, ...]:
    """This machine's own IPv4 and IPv6 addresses (loopback left out), from the kernel's
    tables: the local routes of ``fib_trie`` (``/32 host LOCAL``) and ``if_inet6``.

    Returns:
        Addresses, IPv4 first; empty when the tables cannot be read.
    """
    found: list[str] = []
    try:
        lines = fib_trie.read_text().splitlines()
    except OSError:
        lines = []
    for previous, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            try:
                local = ipaddress.ip_address(previous.split()[-1])
            except ValueError:
                continue
            if not (local.is_loopback or local in ipaddress.ip_network("0.0.0.0/8")):
                found.append(str(local))
    try:
        for line in if_inet6.read_text().splitlines():
            raw = line.split()[0] if line.split() else ""
            if len(raw) == 32:
                address = ipaddress.IPv6Address(int(raw, 16))
                if not address.is_loopback and not address.is_link_local:
                    found.append(str(address))
    except (OSError, ValueError):
        pass
    return tuple(dict.fromkeys(found))


def engine_host_addresses() -> tuple[str, ...]:
    """The current engine's host's addresses (loopback left out): all of this machine's
    (:func:`host_addresses`) for an engine on it, those its name resolves to for an
    ``ssh://`` or ``tcp://`` engine."""
    from git_iterare.sandbox.engine import current

    engine = current()
    if engine.on_this_host:
        return host_addresses()
    return tuple(a for a in engine.network_addresses()
                 if not ipaddress.ip_address(a).is_loopback)


def with_dns(spec: SandboxSpec) -> SandboxSpec:
    """``spec`` with upstream DNS servers (Docker's embedded DNS on user-defined networks
    must not be the upstream, so the resolver gets the servers Docker itself would use)
    and the engine host's addresses to close: all of this machine's for an engine on it,
    those its name resolves to for an ``ssh://`` or ``tcp://`` engine (loopback ones
    are closed anyway)."""
    policy = spec.policy
    if not policy.dns:
        policy = dataclasses.replace(policy, dns=host_dns_servers())
    own = engine_host_addresses()
    if own:
        policy = dataclasses.replace(policy, hosts=tuple(dict.fromkeys((*policy.hosts, *own))))
    return dataclasses.replace(spec, policy=policy)


