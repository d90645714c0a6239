"""The egress policy of a sandbox: which names and networks it may reach.

The network sidecar gets the policy as lines in its environment (``to_lines``; see
``container/sidecar``); the run's record keeps it as JSON (``to_json``).
Names follow RFC 1123 host name syntax (letters, digits and ``-`` in labels of 1-63
characters, 253 characters in all). A plain name allows that name alone: the sandbox's
resolver answers NXDOMAIN for its subdomains without asking upstream. ``*.`` as a whole
leading label allows every subdomain (not the name itself); such queries reach the domain's
name servers, whatever the agent puts in them. An allowed name lets through TCP to the IPv4
and IPv6 addresses it resolves to, on ports 80 and 443, or only on the port the entry
names (``NAME:PORT``, such as ``db.example.com:5432``; the firewall works on addresses, so
names that share an address share their ports); answers in loopback, private,
link-local or shared ranges, or the gateway's address, are not let through unless a CIDR
entry allows them (DNS rebinding). CIDR entries open every TCP port but 22; the subnets
of attached networks (``networks``) every TCP port but 22, 53 and 853 (their resolvers
would answer any name), and never the Docker host's address on them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from git_iterare.errors import UserError

if TYPE_CHECKING:
    from git_iterare.config import Config

#: Names every sandbox may reach: GitHub (git over HTTPS, API, raw files, archives,
#: release downloads) and the npm registry.
BASE_DOMAINS: tuple[str, ...] = (
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "uploads.github.com",
    "objects.githubusercontent.com",
    "*.githubusercontent.com",
    "registry.npmjs.org",
)

_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def validate_domain(name: str, where: str) -> str:
    """Check one allowlist entry and return it in lower case.

    Args:
        name: ``example.com`` or ``*.example.com``, optionally with ``:PORT`` (1-65535).
        where: the config key or file it came from, for the error message.

    Raises:
        UserError: the entry is not a host name or a ``*.`` wildcard of one, naming
            ``where`` and the entry.
    """

    def bad(why: str) -> UserError:
        return UserError(f"{where}: bad domain {name!r}: {why}",
                         hint="use a host name like example.com or *.example.com")

    if not isinstance(name, str) or not name:
        raise bad("empty")
    host, _, port = name.partition(":") if ":" in name else (name, "", "")
    if ":" in name and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535
                            and not port.startswith("0")):
        raise bad("the port after ':' must be a number from 1 to 65535")
    host = host[2:] if host.startswith("*.") else host
    if len(host) > 253:
        raise bad("longer than 253 characters")
    labels = host.split(".")
    for label in labels:
        if "*" in label:
            raise bad("'*' is allowed only as a whole leading label, as in *.example.com")
        if not _LABEL.fullmatch(label):
            raise bad(f"label {label!r} is not letters, digits and inner '-' (1-63 characters)")
    if name.startswith("*.") and len(labels) < 2:
        raise bad("a wildcard needs at least two labels after '*.'")
    if labels[-1].isdigit():
        raise bad("looks like an address; put networks in firewall.allowed_cidrs")
    return name.lower()


def validate_cidr(text: str, where: str) -> str:
    """Check a network (``10.0.0.0/8``, ``2001:db8::/32``) or address; return it normalized.

    Raises:
        UserError: not an IPv4/IPv6 network, naming ``where`` and the entry.
    """
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except (ValueError, TypeError):
        raise UserError(f"{where}: bad network {text!r}",
                        hint="use CIDR notation such as 10.1.0.0/16") from None


def validate_dns_server(text: str, where: str) -> str:
    """Check a DNS server address (IPv4 or IPv6, no port); return it normalized.

    Raises:
        UserError: not an address, naming ``where`` and the entry.
    """
    try:
        return str(ipaddress.ip_address(text))
    except (ValueError, TypeError):
        raise UserError(f"{where}: bad DNS server {text!r}",
                        hint="use an IP address such as 10.0.0.2") from None


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class EgressPolicy:
    """What a sandbox may reach.

    Attributes:
        domains: allowed names, lower case, ``*.`` wildcards included; no duplicates.
        cidrs: allowed networks, normalized (``10.1.0.0/16``).
        dns: upstream DNS servers the sandbox's resolver forwards allowed names to; empty
            means the servers Docker gives the container (never its embedded server).
        hosts: the Docker host's own addresses, closed to the sandbox like its gateway
            (an allowed name that answers one is DNS rebinding) unless a CIDR opens them.
        local_names: names of containers on the networks the user attached the sandbox
            to (``--docker-network``, ``--docker-compose``): resolved by Docker's
            embedded DNS (asked by the sandbox's resolver only, for these names only);
            their addresses are reachable through ``networks``.
        networks: the subnets of those attached networks (CIDR). Unlike ``cidrs`` they
            never open ``hosts`` or the gateway: an attached network's subnet holds the
            Docker host's bridge address.
    """

    domains: tuple[str, ...] = ()
    cidrs: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    local_names: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()

    def to_json(self) -> str:
        """The policy as JSON (the run's record keeps it; the sidecar writes what it
        enforced in this form to its ``out/policy.json``)."""
        return json.dumps({"v": 1, "domains": list(self.domains), "cidrs": list(self.cidrs),
                           "dns": list(self.dns), "hosts": list(self.hosts),
                           "local": list(self.local_names), "networks": list(self.networks)},
                          indent=2) + "\n"

    def to_lines(self) -> str:
        """The policy as the network sidecar reads it (``ITERARE_POLICY``; see
        ``container/sidecar``): ``v 1``, then one ``KIND VALUE`` a line, KIND one of
        ``domain``, ``cidr``, ``dns``, ``host``, ``local``, ``network``. Plain text for a
        shell to read without a JSON parser (jq takes tens of milliseconds to start).

        Raises:
            ValueError: a value is empty or holds white space (entries are validated
                when the policy is built, so this is a programming error).
        """
        lines = ["v 1"]
        for kind, values in (("domain", self.domains), ("cidr", self.cidrs),
                             ("dns", self.dns), ("host", self.hosts),
                             ("local", self.local_names), ("network", self.networks)):
            for value in values:
                if not value or any(c.isspace() for c in value):
                    raise ValueError(f"policy {kind} {value!r} is empty or holds white space")
                lines.append(f"{kind} {value}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "policy") -> EgressPolicy:
        """Read a policy back from its JSON form, validating every entry.

        Raises:
            UserError: a missing list or a bad entry.
        """
        try:
            return cls.build(data.get("domains", []), data.get("cidrs", []),
                             data.get("dns", []), where=where)
        except AttributeError:
            raise UserError(f"{where}: not a policy object") from None

    @classmethod
    def build(cls, domains: Iterable[str], cidrs: Iterable[str] = (),
              dns: Iterable[str] = (), where: str = "policy") -> EgressPolicy:
        """Validate and deduplicate entries (see :func:`validate_domain`)."""
        return cls(
            domains=_unique(validate_domain(d, where) for d in domains),
            cidrs=_unique(validate_cidr(c, where) for c in cidrs),
            dns=_unique(validate_dns_server(s, where) for s in dns),
        )

    def allows(self, name: str) -> bool:
        """Whether ``name`` is allowed: listed, or a subdomain of a ``*.`` entry (on any
        of the entries' ports)."""
        name = name.lower().rstrip(".")
        for entry in (d.rsplit(":", 1)[0] for d in self.domains):
            if entry.startswith("*."):
                if name.endswith(entry[1:]):
                    return True
            elif name == entry:
                return True
        return False


def policy_from_config(config: Config, agent_domains: Iterable[str] = ()) -> EgressPolicy:
    """Build a run's policy: the agent's domains, :data:`BASE_DOMAINS`, then config.

    Args:
        config: a :class:`git_iterare.config.Config`; reads ``firewall.allowed_domains``,
            ``firewall.allowed_cidrs`` and ``docker.dns``.
        agent_domains: names the agent needs (for Claude Code: the Anthropic API).

    Raises:
        UserError: a bad entry, naming the config key and where its value came from.
    """

    def where(key: str) -> str:
        return f"{key} (from {config.origin(key)})"

    agent = [validate_domain(d, "agent domains") for d in agent_domains]
    extra = [validate_domain(d, where("firewall.allowed_domains"))
             for d in config["firewall.allowed_domains"]]
    cidrs = [validate_cidr(c, where("firewall.allowed_cidrs"))
             for c in config["firewall.allowed_cidrs"]]
    dns = [validate_dns_server(s, where("docker.dns")) for s in config["docker.dns"]]
    return EgressPolicy(domains=_unique([*agent, *BASE_DOMAINS, *extra]),
                        cidrs=_unique(cidrs), dns=_unique(dns))
