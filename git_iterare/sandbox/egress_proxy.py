"""git-iterare's egress proxy: the only way out of a sandbox whose agent has no network
namespace of git-iterare's (a swarm service cannot join another container's namespace).

The agent's container is then on an internal network with no gateway, where the only
other member is its egress: a container of git-iterare's own image, on that network and
an outer one, that runs the network sidecar (``container/sidecar`` with
``ITERARE_PROXY_PORT``: the resolver, the firewall and its self-check, as for every
sandbox) and this proxy, as an account of its own, behind that firewall. The agent
reaches the allowlist only as an HTTP proxy's client (``HTTPS_PROXY``, ``HTTP_PROXY``):

* ``CONNECT host:port`` (RFC 9110, section 9.3.6) opens a tunnel, for HTTPS and any TCP
  the allowlist opens on that port;
* a request in absolute form (``GET http://host/path HTTP/1.1``, RFC 9112, section 3.2.2)
  is sent on to ``host`` in origin form, with ``Connection: close``.

The target must be a host name the policy allows on that port, or an IPv4 address in one
of its CIDR entries (any port but 22): the same rules as the sidecar's resolver and
firewall (:mod:`git_iterare.sandbox.policy`). Anything else gets ``403`` and a line on the
proxy's standard error. The name is resolved by the sidecar's resolver (only allowlisted names
resolve, and it lets their addresses through the firewall); loopback and unspecified
answers are refused here (the firewall lets loopback through for the resolver); every
other range (private, link-local, the gateway) is the firewall's to refuse, as for any
sandbox. So what leaves is exactly what a local sandbox lets out, for programs that use
a proxy; nothing else can leave at all.

Runs as ``python3 egress_proxy.py PORT`` with the policy in ``ITERARE_POLICY`` (the
sidecar's lines: :meth:`~git_iterare.sandbox.policy.EgressPolicy.to_lines`); it uses the
standard library only (git-iterare's image has ``python3`` and nothing of this package).
It prints ``iterare-egress: listening on PORT`` once it accepts connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

#: Largest request head read (request line and headers), in bytes.
MAX_HEAD_BYTES = 16 * 1024
#: How long a client has to send its request head, in seconds.
HEAD_TIMEOUT = 30.0
#: How long connecting to the target may take, in seconds (each address).
CONNECT_TIMEOUT = 10.0
#: Most tunnels and requests open at once; more are closed at once.
MAX_CONNECTIONS = 512
#: Bytes copied at a time.
CHUNK = 64 * 1024
#: Longest host name kept in a log line (a name has at most 253 characters).
MAX_LOGGED_HOST = 256

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
               b"proxy-authenticate", b"te", b"trailer", b"upgrade"}

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


@dataclass(frozen=True)
class Allowlist:
    """The names a proxy lets through, and on which ports.

    Attributes:
        entries: ``(name, port)`` pairs: ``name`` lower case, ``*.`` wildcards kept
            (a wildcard covers the subdomains, not the name itself); ``port`` None for
            80 and 443.
        networks: the policy's CIDR entries: an address in one may be a target, on any
            TCP port but 22 (as the firewall opens them).
    """

    entries: tuple[tuple[str, int | None], ...]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_lines(cls, text: str) -> Allowlist:
        """Read the ``domain`` lines of a policy in the sidecar's form (``v 1``, then
        ``KIND VALUE`` lines); other kinds are the firewall's.

        Raises:
            ValueError: no ``v 1`` line, or a bad ``domain`` line.
        """
        entries: list[tuple[str, int | None]] = []
        networks = []
        version = None
        for line in text.splitlines():
            kind, _, value = line.strip().partition(" ")
            if kind == "v":
                version = value
            elif kind == "domain":
                name, sep, port = value.partition(":")
                if sep and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
                    raise ValueError(f"bad port in policy line {line!r}")
                if not _host_name(name.removeprefix("*.")):
                    raise ValueError(f"bad domain in policy line {line!r}")
                entries.append((name.lower(), int(port) if sep else None))
            elif kind == "cidr":
                networks.append(ipaddress.ip_network(value, strict=False))
        if version != "1":
            raise ValueError("the policy has no 'v 1' line")
        return cls(tuple(entries), tuple(networks))

    def refusal(self, host: str, port: int) -> str | None:
        """Why ``host`` (a name as a client wrote it) on TCP ``port`` is refused, or None
        when an entry allows it."""
        name = host.lower()
        name = name[:-1] if name.endswith(".") else name
        address = _address(host)
        if address is not None:
            if port == 22 or not any(address in net for net in self.networks):
                return f"the address is one no CIDR entry opens on port {port}"
            return None
        if not _host_name(name):
            return "the target is not a host name"
        names = [entry for entry in self.entries if _matches(entry[0], name)]
        if not names:
            return "the name is not on the allowlist"
        if not any(port in ((80, 443) if p is None else (p,)) for _, p in names):
            return f"the name is allowed, but not on port {port}"
        return None


def _matches(entry: str, name: str) -> bool:
    if entry.startswith("*."):
        return name.endswith(entry[1:]) and len(name) > len(entry) - 1
    return name == entry


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an IPv4 address in dotted-quad form, or None (IPv6 targets would need
    brackets, which :func:`parse_head` refuses; ``inet_aton``'s other forms are names
    here, and no name is all digits)."""
    if not re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", text):
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _host_name(name: str) -> bool:
    """Whether ``name`` is an RFC 1123 host name (lower case), not an address."""
    if not 0 < len(name) <= 253:
        return False
    labels = name.split(".")
    return all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to for TCP (through the container's resolver),
    without loopback and unspecified ones.

    Raises:
        OSError: the name does not resolve.
    """
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found = []
    for info in infos:
        address = str(info[4][0])
        ip = ipaddress.ip_address(address.split("%")[0])
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if (mapped or ip).is_loopback or (mapped or ip).is_unspecified:
            continue
        found.append(address)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Request:
    """A client's request, parsed.

    Attributes:
        host, port: the target.
        tunnel: True for CONNECT.
        head: for a request in absolute form, what to send the target (request line in
            origin form, the target's ``Host``, the other headers without hop-by-hop
            ones, ``Connection: close``).
        body: bytes of its body (``Content-Length``): only those follow the head to the
            target, so a second request on the connection goes nowhere.
    """

    host: str
    port: int
    tunnel: bool
    head: bytes = b""
    body: int = 0


class BadRequest(Exception):
    """A request the proxy cannot parse or does not serve (``status``: 400, 405 or
    411)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


def parse_head(head: bytes) -> Request:
    """Parse a request head (``\\r\\n``-separated, ending with an empty line).

    Raises:
        BadRequest: not ``CONNECT host:port`` nor an ``http://`` request in absolute
            form.
    """
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest("not an HTTP/1 request line")
    method, target, version = parts
    if not target.isascii() or any(b < 0x21 or b == 0x7f for b in target):
        raise BadRequest("the target must be printable ASCII (percent-encode the rest)")
    text = target.decode("ascii")
    if method == b"CONNECT":
        host, port = _authority(text, None)
        return Request(host, port, tunnel=True)
    if not text.lower().startswith("http://"):
        raise BadRequest("only CONNECT and http:// requests in absolute form are served",
                         405)
    rest = text[len("http://"):]
    # RFC 3986, section 3.2: the authority ends at the first "/", "?" or "#".
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:].partition("#")[0]
    host, port = _authority(authority, 80)
    origin = tail if tail.startswith("/") else "/" + tail
    headers = [line for line in lines[1:] if line]
    names = [line.split(b":", 1)[0].strip().lower() for line in headers]
    if b"transfer-encoding" in names:
        raise BadRequest("a request body must have a Content-Length", 411)
    length = 0
    for name, line in zip(names, headers, strict=True):
        if name == b"content-length":
            value = line.partition(b":")[2].strip()
            if not value.isdigit() or (length and int(value) != length):
                raise BadRequest("bad Content-Length")
            length = int(value)
    kept = [line for name, line in zip(names, headers, strict=True)
            if name not in _HOP_BY_HOP and name != b"host"]
    # RFC 9112, section 3.2.2: the Host header is the target's, whatever the client sent.
    out = b"\r\n".join([method + b" " + origin.encode("ascii") + b" " + version,
                        b"Host: " + authority.encode("ascii"), *kept,
                        b"Connection: close"]) + b"\r\n\r\n"
    return Request(host, port, tunnel=False, head=out, body=length)


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``(host, port)`` of ``host[:port]``, the host lower case without a trailing dot
    (the name is resolved as it was checked: letter case is no channel to upstream DNS).

    Raises:
        BadRequest: a user part, brackets or a bad port.
    """
    host, port = _split_authority(text, default_port)
    host = host.lower()
    return (host[:-1] if host.endswith(".") else host), port


def _split_authority(text: str, default_port: int | None) -> tuple[str, int]:
    if "@" in text or text.startswith("["):
        raise BadRequest(f"bad target {text[:100]!r}")
    host, sep, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not sep:
        if default_port is None:
            raise BadRequest(f"CONNECT needs host:port, got {text[:100]!r}")
        return text, default_port
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536) or ":" in host:
        raise BadRequest(f"bad port in {text[:100]!r}")
    return host, int(port)


class Proxy:
    """The proxy's connection handler (:meth:`serve` to run it).

    Args:
        allowlist: what it lets through.
        resolve: ``(host, port) -> addresses`` (:func:`system_resolve`; tests give
            another).
        log: called with one JSON line per decision.
    """

    def __init__(self, allowlist: Allowlist, resolve: Resolver = system_resolve,
                 log: Callable[[str], None] | None = None) -> None:
        self.allowlist = allowlist
        self.resolve = resolve
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.open = 0

    def _note(self, host: str, port: int, allowed: bool, reason: str = "") -> None:
        # Bounded: the host is the agent's text (the reason names no host).
        self.log(json.dumps({"egress": "allowed" if allowed else "refused",
                             "host": host[:MAX_LOGGED_HOST], "port": port,
                             **({"reason": reason} if reason else {})}))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection."""
        if self.open >= MAX_CONNECTIONS:
            writer.close()
            return
        self.open += 1
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        try:
            request = parse_head(head)
        except BadRequest as bad:
            await _answer(writer, bad.status, str(bad))
            return
        reason = self.allowlist.refusal(request.host, request.port)
        if reason is None:
            try:
                addresses = await self.resolve(request.host, request.port)
            except OSError:
                addresses = []
            if not addresses:
                reason = "the name does not resolve to an address that may be reached"
        if reason is not None:
            self._note(request.host, request.port, False, reason)
            await _answer(writer, 403, reason)
            return
        upstream = await _connect(addresses, request.port)
        if upstream is None:
            self._note(request.host, request.port, False, "the connection was refused")
            await _answer(writer, 502, f"cannot connect to {request.host}:{request.port}")
            return
        self._note(request.host, request.port, True)
        up_reader, up_writer = upstream
        try:
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            else:
                up_writer.write(request.head)
                if request.body:
                    up_writer.write(await reader.readexactly(request.body))
                await up_writer.drain()
                await _pipe(up_reader, writer)
        finally:
            up_writer.close()

    async def serve(self, port: int, host: str = "0.0.0.0") -> asyncio.Server:
        """Listen on ``host``:``port`` (TCP); return the server (already serving)."""
        return await asyncio.start_server(self.handle, host, port, limit=MAX_HEAD_BYTES,
                                          reuse_address=True)


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    phrase = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
              411: "Length Required", 502: "Bad Gateway"}[status]
    body = f"iterare-egress: {reason}\n".encode("utf-8", "replace")
    writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()


async def _connect(addresses: Sequence[str], port: int
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    for address in addresses:
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port),
                                          CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError):
            continue
    return None


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


async def _main(port: int, allowlist: Allowlist) -> None:
    server = await Proxy(allowlist).serve(port)
    print(f"iterare-egress: listening on {port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str]) -> int:
    """``egress_proxy.py PORT``, the policy in ``ITERARE_POLICY``; exit status 2 for bad
    usage or policy (never returns otherwise)."""
    try:
        port = int(argv[1]) if len(argv) == 2 else 0
        allowlist = Allowlist.from_lines(os.environ.get("ITERARE_POLICY", ""))
    except ValueError as bad:
        print(f"iterare-egress: error: {bad}", file=sys.stderr)
        return 2
    if not 0 < port < 65536:
        print("iterare-egress: usage: egress_proxy.py PORT", file=sys.stderr)
        return 2
    asyncio.run(_main(port, allowlist))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
