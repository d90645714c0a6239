"""A hostile agent against the egress proxy (git_iterare/sandbox/egress_proxy.py behind
container/sidecar with ITERARE_PROXY_PORT), on the topology of test_egress_service_e2e:
the agent's container (uid 1900000, no capabilities) on the run's internal network, whose
only other member is the egress.

Each test sends raw requests to egress:3128 from the agent's container. Where what the
proxy sends on matters, the target is a recorder run in the intranet2 container of the
escape suite's local internet (10.231.N.31, which the policy's CIDR entry opens): it keeps
the bytes of each connection it gets.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.sandbox_fixtures import (  # noqa: F401 (fixtures)
    NET,
    docker_cleanup,
    docker_compose_command,
    docker_compose_file,
    docker_compose_project_name,
    docker_setup,
    host_listener,
    sandbox_image,
    test_network,
)
from tests.test_egress_service_e2e import AGENT, _agent_args, _docker, egress  # noqa: F401
from tests.test_sandbox_escape import hostile_image  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RECORDER_PORT = 9999
#: Runs in the agent's container: reads a JSON list of requests (latin-1 text), sends
#: each on a connection of its own to the proxy, prints a JSON list of the answers.
PROBE = r"""
import json, socket, sys
answers = []
for request in json.load(sys.stdin):
    s = socket.create_connection(("egress", 3128), timeout=5)
    s.sendall(request.encode("latin-1"))
    s.settimeout(4)
    got = b""
    try:
        while data := s.recv(65536):
            got += data
    except (socket.timeout, OSError):
        pass
    s.close()
    answers.append(got.decode("latin-1"))
print(json.dumps(answers))
"""
#: Runs in the recorder's container: keeps what each connection sent in /tmp/rec-N.
RECORDER = r"""
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(16)
n = 0
while True:
    conn, _ = server.accept()
    conn.settimeout(2)
    got = b""
    try:
        while data := conn.recv(65536):
            got += data
    except OSError:
        pass
    with open(f"/tmp/rec-{n}", "wb") as f:
        f.write(got)
    n += 1
    conn.close()
"""


@pytest.fixture(scope="module")
def attacker(egress: dict[str, str], hostile_image: str,  # noqa: F811
             host_listener: int) -> Iterator[str]:  # noqa: F811
    """The agent's container (from the hostile project image), idle; yields its name."""
    name = f"itr-hostegress-agent-{int(time.time() * 1000) % 10**9}"
    _docker("run", "-d", "--user", AGENT, *_agent_args(name, egress, host_listener),
            hostile_image, "-c", "sleep 1800")
    try:
        yield name
    finally:
        _docker("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def recorder(test_network: str, docker_compose_project_name: str  # noqa: F811
             ) -> str:
    """The intranet2 container (the CIDR entry's address), recording connections on
    RECORDER_PORT; yields its name (the compose project removes it)."""
    name = f"{docker_compose_project_name}_intranet2_1"
    _docker("exec", "-d", name, "python3", "-c", RECORDER, str(RECORDER_PORT))
    time.sleep(1)
    return name


def _probe(attacker: str, *requests: bytes) -> list[bytes]:
    """Send each request from the agent's container; the proxy's answers."""
    result = subprocess.run(
        ["docker", "exec", "-i", attacker, "python3", "-c", PROBE],
        input=json.dumps([r.decode("latin-1") for r in requests]), capture_output=True,
        text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return [a.encode("latin-1") for a in json.loads(result.stdout)]


def _recorded(recorder: str, marker: bytes) -> bytes:
    """What the recorder got on the connection whose bytes hold ``marker``."""
    out = subprocess.run(["docker", "exec", recorder, "sh", "-c",
                          "for f in /tmp/rec-*; do cat \"$f\"; printf '\\0\\0'; done"],
                         capture_output=True, timeout=60, check=False).stdout
    found = [c for c in out.split(b"\0\0") if marker in c]
    assert found, f"the recorder got nothing with {marker!r}: {out[-2000:]!r}"
    return found[0]


def _logs(name: str) -> str:
    result = subprocess.run(["docker", "logs", name], capture_output=True, text=True,
                            check=False)
    return result.stdout + result.stderr


def _intranet2() -> str:
    return f"{NET['INTRANET2_V4']}:{RECORDER_PORT}"


def test_a_non_ascii_target_gets_an_answer_and_no_traceback(
        attacker: str, egress: dict[str, str]) -> None:  # noqa: F811
    """A byte above 0x7f in an absolute-form target raised UnicodeEncodeError out of
    parse_head: the client got no answer (the connection just closed), no decision was
    logged, and the proxy's log got an asyncio traceback."""
    answer, = _probe(attacker, b"GET http://allowed.test/caf\xc3\xa9 HTTP/1.1\r\n"
                               b"Host: allowed.test\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert "Traceback" not in _logs(egress["egress"])


def test_the_name_goes_to_upstream_dns_as_the_allowlist_checked_it(
        attacker: str, docker_compose_project_name: str) -> None:  # noqa: F811
    """The proxy checks the name lower-cased but resolves it as the client wrote it, and
    dnsmasq forwards the question's case as it came: the case of each letter of an allowed
    name is a bit the agent sends to the upstream DNS servers (and the authoritative
    servers of the allowed domain), one query per request (dnsmasq 2.89: no 0x20
    randomisation). The trailing dot is one more."""
    pattern = "".join(c.upper() if random.random() < 0.5 else c for c in "allowed.test")
    pattern = pattern if pattern != "allowed.test" else "aLLOWED.TEST"
    answer, = _probe(attacker, f"CONNECT {pattern}:80 HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    dns_log = _logs(f"{docker_compose_project_name}_dns_1")
    assert f" {pattern} " not in dns_log, [
        line for line in dns_log.splitlines() if pattern in line]


def test_absolute_form_sends_the_targets_host_not_the_clients(
        attacker: str, recorder: str) -> None:
    """RFC 9112, section 3.2.2: a proxy MUST replace the Host header of an absolute-form
    request with the target's. The proxy checks the URI's authority and passes the
    client's Host on: on an allowed address shared by several sites (a CDN edge, shared
    hosting, a cloud load balancer), the site served is the one in Host, which the
    allowlist never saw (domain fronting in clear text)."""
    _probe(attacker, f"GET http://{_intranet2()}/host-check HTTP/1.1\r\n"
                     "Host: blocked.test\r\n\r\n".encode())
    got = _recorded(recorder, b"/host-check")
    assert f"\r\nHost: {_intranet2()}\r\n".encode() in got, got
    assert b"blocked.test" not in got, got


def test_a_pipelined_request_for_another_host_is_not_sent_to_the_first(
        attacker: str, recorder: str) -> None:
    """After the first head the proxy copies the client's bytes to the first target as
    they come: a second request on the connection, for another host, reaches the first
    host (it should be answered by the proxy, checked, or dropped), so a client that
    reuses its proxy connection gets the wrong site's answer, and the first target gets
    requests the proxy never parsed (absolute form, hop-by-hop headers)."""
    _probe(attacker, f"GET http://{_intranet2()}/pipe-first HTTP/1.1\r\n"
                     f"Host: {_intranet2()}\r\n\r\n"
                     "GET http://blocked.test/pipe-second HTTP/1.1\r\n"
                     "Host: blocked.test\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n"
                     .encode())
    got = _recorded(recorder, b"/pipe-first")
    assert b"pipe-second" not in got and b"Proxy-Authorization" not in got, got


def test_a_query_before_the_first_slash_is_kept(attacker: str, recorder: str) -> None:
    """``http://host?q=a/b`` has the path ``/?q=a/b`` (RFC 3986: the query ends the
    authority); the proxy cuts the target at the first slash and sends ``/b``."""
    _probe(attacker, f"GET http://{_intranet2()}?q=query-check/b HTTP/1.1\r\n"
                     f"Host: {_intranet2()}\r\n\r\n".encode())
    got = _recorded(recorder, b"query-check")
    assert got.startswith(b"GET /?q=query-check/b HTTP/1.1\r\n"), got[:200]


def test_a_refusal_log_line_is_bounded(attacker: str,
                                       egress: dict[str, str]) -> None:  # noqa: F811
    """A refused target is logged whole, twice (host and reason): one request with a 15 KB
    host writes a 30 KB line, so a few thousand requests (seconds) fill the engine's log
    (LOG_OPTIONS: 2 x 50 MB) and rotate out every earlier line of the run's egress, and a
    person reading the log reads pages of the agent's text."""
    host = "x" * 15000
    answer, = _probe(attacker, f"CONNECT {host}:80 HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    lines = [line for line in _logs(egress["egress"]).splitlines() if "xxxxxxxxxx" in line]
    assert lines and max(map(len, lines)) <= 1024, [len(line) for line in lines]
