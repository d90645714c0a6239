"""The egress proxy's rules and protocol (git_iterare/sandbox/egress_proxy.py), on loopback
(no Docker: the firewall behind it is tested in test_egress_service_e2e.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from git_iterare.sandbox import egress_proxy as ep
from git_iterare.sandbox.policy import EgressPolicy

POLICY = EgressPolicy.build(["allowed.test", "*.wild.test", "port.test:8080", "Both.test",
                             "both.test:8443"], cidrs=["10.231.1.0/24"]).to_lines()


def test_the_allowlist_follows_the_policy_lines() -> None:
    allow = ep.Allowlist.from_lines(POLICY)
    assert allow.refusal("allowed.test", 443) is None
    assert allow.refusal("ALLOWED.test.", 80) is None
    assert allow.refusal("x.wild.test", 443) is None and allow.refusal("a.b.wild.test", 80) is None
    assert allow.refusal("port.test", 8080) is None
    assert allow.refusal("both.test", 443) is None and allow.refusal("both.test", 8443) is None
    assert allow.refusal("10.231.1.31", 8080) is None  # a CIDR entry opens its addresses
    refused = {
        ("wild.test", 443): "not on the allowlist",       # a wildcard is not the name
        ("sub.allowed.test", 443): "not on the allowlist",  # a plain name is not its subdomains
        ("xallowed.test", 443): "not on the allowlist",
        ("evilwild.test", 443): "not on the allowlist",
        ("allowed.test", 22): "not on port 22",
        ("port.test", 443): "not on port 443",
        ("198.51.100.7", 443): "no CIDR entry opens",
        ("10.231.1.31", 22): "no CIDR entry opens",
        ("10.231.2.31", 80): "no CIDR entry opens",
        ("010.231.1.31", 80): "not a host name",  # octal-looking: never an address
        ("2001:db8::1", 443): "not a host name",
        ("allowed.test\x00.evil", 443): "not a host name",
        ("", 443): "not a host name",
        ("allowed..test", 443): "not a host name",
    }
    for (host, port), why in refused.items():
        reason = allow.refusal(host, port)
        assert reason is not None and why in reason, (host, port, reason)


def test_bad_policy_lines_are_refused() -> None:
    with pytest.raises(ValueError, match="v 1"):
        ep.Allowlist.from_lines("domain allowed.test\n")
    with pytest.raises(ValueError, match="bad port"):
        ep.Allowlist.from_lines("v 1\ndomain a.test:0\n")
    with pytest.raises(ValueError, match="bad domain"):
        ep.Allowlist.from_lines("v 1\ndomain 10.0.0.1\n")
    # Other kinds are the firewall's.
    assert ep.Allowlist.from_lines("v 1\ncidr 10.0.0.0/8\ndns 10.0.0.2\n").entries == ()


def test_request_heads() -> None:
    connect = ep.parse_head(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (connect.host, connect.port, connect.tunnel) == ("allowed.test", 443, True)
    get = ep.parse_head(b"GET http://allowed.test/a/b?c=d HTTP/1.1\r\nHost: allowed.test\r\n"
                        b"Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n"
                        b"Connection: keep-alive\r\nAccept: */*\r\n\r\n")
    assert (get.host, get.port, get.tunnel) == ("allowed.test", 80, False)
    assert get.head == (b"GET /a/b?c=d HTTP/1.1\r\nHost: allowed.test\r\nAccept: */*\r\n"
                        b"Connection: close\r\n\r\n")
    assert ep.parse_head(b"GET http://port.test:8080?q HTTP/1.0\r\n\r\n").head.startswith(
        b"GET /?q HTTP/1.0\r\n")
    for bad, status in ((b"GET /local HTTP/1.1\r\n\r\n", 405),
                        (b"GET https://allowed.test/ HTTP/1.1\r\n\r\n", 405),
                        (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", 400),
                        (b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", 400),
                        (b"CONNECT user@allowed.test:443 HTTP/1.1\r\n\r\n", 400),
                        (b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n", 400),
                        (b"CONNECT allowed.test:443 SPDY/3\r\n\r\n", 400),
                        (b"GET  http://allowed.test/ HTTP/1.1\r\n\r\n", 400)):
        with pytest.raises(ep.BadRequest) as caught:
            ep.parse_head(bad)
        assert caught.value.status == status, bad


def test_the_resolver_drops_loopback_answers() -> None:
    assert asyncio.run(ep.system_resolve("localhost", 80)) == []


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    out = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return out


def test_tunnels_and_requests_reach_allowed_names_only() -> None:
    async def scenario() -> None:
        seen: list[bytes] = []

        async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            data = await reader.read(65536)
            seen.append(data)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\norigin")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(origin, "127.0.0.1", 0)
        target = server.sockets[0].getsockname()[1]
        lines = EgressPolicy.build([f"allowed.test:{target}", "gone.test"]).to_lines()

        async def resolve(host: str, port: int) -> Sequence[str]:
            return {"allowed.test": ["127.0.0.1"], "gone.test": []}.get(host, ["127.0.0.1"])

        log: list[str] = []
        proxy = await ep.Proxy(ep.Allowlist.from_lines(lines), resolve, log.append).serve(
            0, "127.0.0.1")
        port = proxy.sockets[0].getsockname()[1]
        tunnel = await _exchange(port, f"CONNECT allowed.test:{target} HTTP/1.1\r\n\r\n"
                                 "ping".encode())
        assert tunnel.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n")
        assert tunnel.endswith(b"origin") and seen[-1] == b"ping"
        plain = await _exchange(port, f"GET http://allowed.test:{target}/x HTTP/1.1\r\n"
                                "Host: allowed.test\r\nProxy-Authorization: s\r\n\r\n".encode())
        assert plain.endswith(b"origin")
        assert seen[-1] == (f"GET /x HTTP/1.1\r\nHost: allowed.test:{target}\r\n"
                            "Connection: close\r\n\r\n").encode()
        for request, status in ((f"CONNECT blocked.test:{target}", b"403"),
                                (f"CONNECT allowed.test:{target + 1}", b"403"),
                                (f"CONNECT 127.0.0.1:{target}", b"403"),
                                ("CONNECT gone.test:443", b"403"),
                                ("GET /x", b"405")):
            answer = await _exchange(port, f"{request} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 " + status), (request, answer)
            assert b"iterare-egress: " in answer
        assert len(seen) == 2  # nothing refused reached the origin
        decisions = [json.loads(line) for line in log]
        assert [d["egress"] for d in decisions] == ["allowed", "allowed", "refused", "refused",
                                                    "refused", "refused"]
        assert "does not resolve" in decisions[-1]["reason"]
        # A head that never ends is cut off at its limit.
        flood = await _exchange(port, b"CONNECT allowed.test:1 HTTP/1.1\r\n" + b"X: y\r\n" * 4000)
        assert flood == b""
        proxy.close()
        server.close()

    asyncio.run(scenario())


def test_usage_and_bad_policy_exit_2(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ITERARE_POLICY", "domain a.test\n")
    assert ep.main(["egress-proxy", "3128"]) == 2
    assert "no 'v 1' line" in capsys.readouterr().err
    monkeypatch.setenv("ITERARE_POLICY", POLICY)
    assert ep.main(["egress-proxy"]) == 2
    assert "usage" in capsys.readouterr().err
