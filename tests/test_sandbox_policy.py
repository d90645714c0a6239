"""Unit tests: egress policy validation and the egress report parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_iterare import config as config_mod
from git_iterare.errors import UserError
from git_iterare.sandbox import BASE_DOMAINS, EgressPolicy, policy_from_config, read_egress_report
from git_iterare.sandbox.egress import parse_dns_log
from git_iterare.sandbox.exitcodes import SandboxExit, describe
from git_iterare.sandbox.policy import validate_domain
from git_iterare.sandbox.spec import Limits, SandboxSpec, memory_bytes


@pytest.mark.parametrize("name", ["github.com", "*.githubusercontent.com", "a-b.c0.io",
                                  "X.Example.ORG", "localhost", "xn--bcher-kva.example"])
def test_good_domains(name: str) -> None:
    assert validate_domain(name, "k") == name.lower()


@pytest.mark.parametrize("name,why", [
    ("", "empty"),
    ("*", "'*' is allowed only as a whole leading label"),
    ("*.com", "a wildcard needs at least two labels"),
    ("a.*.com", "'*' is allowed only as a whole leading label"),
    ("*foo.com", "'*' is allowed only as a whole leading label"),
    ("foo..com", "label ''"),
    ("-foo.com", "label '-foo'"),
    ("foo.com.", "label ''"),
    ("foo.com/x", "label 'com/x'"),
    ("foo.com extra", "label 'com extra'"),
    ("10.0.0.1", "looks like an address"),
    ("a" * 64 + ".com", "1-63 characters"),
])
def test_bad_domains_name_key_and_entry(name: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        validate_domain(name, "firewall.allowed_domains (from file:/p/config.toml)")
    text = info.value.render()
    assert text.startswith(
        f"firewall.allowed_domains (from file:/p/config.toml): bad domain {name!r}: ")
    assert why in text


def _config(tmp_path: Path, body: str) -> config_mod.Config:
    path = tmp_path / "config.toml"
    path.write_text(body)
    settings = dict(config_mod.load(None, env={"HOME": str(tmp_path),
                                               "XDG_CONFIG_HOME": str(tmp_path / "x")},
                                    git_entries=[]).settings)
    doc = config_mod.parse_toml_file(path)
    for section, table in doc.items():
        for key, value in table.items():
            name = f"{section}.{key}"
            settings[name] = config_mod.Setting(name, value, f"file:{path}")
    return config_mod.Config(settings)


def test_policy_from_config_orders_and_dedups(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[firewall]\nallowed_domains = ["Example.com", "github.com"]\n'
                            'allowed_cidrs = ["10.1.2.3/16"]\n[docker]\ndns = ["10.0.0.2"]\n')
    policy = policy_from_config(cfg, ["api.anthropic.com"])
    assert policy == EgressPolicy(("api.anthropic.com", *BASE_DOMAINS, "example.com"),
                                  ("10.1.0.0/16",), ("10.0.0.2",))
    assert json.loads(policy.to_json()) == {"v": 1, "domains": list(policy.domains),
                                            "cidrs": ["10.1.0.0/16"], "dns": ["10.0.0.2"],
                                            "hosts": [], "local": [], "networks": []}


def test_policy_lines_for_the_sidecar() -> None:
    policy = EgressPolicy(("a.test", "*.b.test", "db.test:5432"), ("10.1.0.0/16",),
                          ("10.0.0.2",), hosts=("192.0.2.2",), local_names=("db",),
                          networks=("172.18.0.0/16",))
    assert policy.to_lines() == ("v 1\ndomain a.test\ndomain *.b.test\ndomain db.test:5432\n"
                                 "cidr 10.1.0.0/16\ndns 10.0.0.2\nhost 192.0.2.2\nlocal db\n"
                                 "network 172.18.0.0/16\n")
    assert EgressPolicy().to_lines() == "v 1\n"


@pytest.mark.parametrize("bad", ["a.test b.test", "a.test\ncidr 0.0.0.0/0", ""])
def test_policy_lines_refuse_a_value_that_could_make_two(bad: str) -> None:
    with pytest.raises(ValueError):
        EgressPolicy((bad,)).to_lines()


def test_policy_from_config_names_the_file(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[firewall]\nallowed_domains = ["ok.com", "bad_name.com"]\n')
    with pytest.raises(UserError) as info:
        policy_from_config(cfg)
    assert info.value.render() == (
        f"firewall.allowed_domains (from file:{tmp_path}/config.toml): bad domain "
        "'bad_name.com': label 'bad_name' is not letters, digits and inner '-' (1-63 "
        "characters) (use a host name like example.com or *.example.com)")


@pytest.mark.parametrize("key,body,entry", [
    ("firewall.allowed_cidrs", '[firewall]\nallowed_cidrs = ["10.0.0.0/33"]\n', "10.0.0.0/33"),
    ("docker.dns", '[docker]\ndns = ["dns.google"]\n', "dns.google"),
])
def test_bad_networks_and_servers(tmp_path: Path, key: str, body: str, entry: str) -> None:
    with pytest.raises(UserError) as info:
        policy_from_config(_config(tmp_path, body))
    assert info.value.message.startswith(f"{key} (from file:{tmp_path}/config.toml): bad ")
    assert repr(entry) in info.value.message


def test_allows_matches_wildcards_but_not_parents() -> None:
    policy = EgressPolicy.build(["github.com", "*.githubusercontent.com"])
    assert policy.allows("github.com") and policy.allows("GitHub.com.")
    assert policy.allows("raw.githubusercontent.com")
    assert not policy.allows("githubusercontent.com")
    assert not policy.allows("api.github.com")
    assert not policy.allows("evilgithub.com")


LOG = """\
Nov 29 17:02:24 dnsmasq[22]: started, version 2.90 cachesize 1000
Nov 29 17:02:24 dnsmasq[22]: 1 127.0.0.1/48021 query[A] iterare-selfcheck.invalid from 127.0.0.1
Nov 29 17:02:24 dnsmasq[22]: 1 127.0.0.1/48021 config iterare-selfcheck.invalid is NXDOMAIN
Nov 29 17:02:25 dnsmasq[22]: 2 127.0.0.1/40000 query[A] allowed.test from 127.0.0.1
Nov 29 17:02:25 dnsmasq[22]: 2 127.0.0.1/40000 forwarded allowed.test to 10.231.7.10
Nov 29 17:02:25 dnsmasq[22]: 2 127.0.0.1/40000 reply allowed.test is 10.231.7.20
Nov 29 17:02:25 dnsmasq[22]: 3 127.0.0.1/40001 query[AAAA] Blocked.test from 127.0.0.1
Nov 29 17:02:25 dnsmasq[22]: 3 127.0.0.1/40001 config blocked.test is NXDOMAIN
Nov 29 17:02:26 dnsmasq[22]: 4 127.0.0.1/40002 query[A] blocked.test from 127.0.0.1
Nov 29 17:02:26 dnsmasq[22]: 4 127.0.0.1/40002 config blocked.test is NXDOMAIN
Nov 29 17:02:26 dnsmasq[22]: 5 127.0.0.1/40003 query[A] allowed.test from 127.0.0.1
Nov 29 17:02:26 dnsmasq[22]: 5 127.0.0.1/40003 cached allowed.test is 10.231.7.20
"""


def test_parse_dns_log_counts() -> None:
    assert parse_dns_log(LOG) == ({"allowed.test": 2}, {"blocked.test": 2})


#: Lines the resolver wrote for names the agent chose (dnsmasq 2.90, seen in the sidecar's
#: image): spaces pass as they are, control characters become ``<name unprintable>``.
HOSTILE_LOG = """\
Dec  2 00:53:04 dnsmasq[9]: 1 127.0.0.1/32999 query[A] api.anthropic.com evil.test from 127.0.0.1
Dec  2 00:53:04 dnsmasq[9]: 1 127.0.0.1/32999 config api.anthropic.com evil.test is NXDOMAIN
Dec  2 00:53:04 dnsmasq[9]: 2 127.0.0.1/34088 query[A] allowed.test from x from 127.0.0.1
Dec  2 00:53:04 dnsmasq[9]: 2 127.0.0.1/34088 config allowed.test from x is NXDOMAIN
Dec  2 00:53:04 dnsmasq[9]: 3 127.0.0.1/47455 query[A] <name unprintable> from 127.0.0.1
Dec  2 00:53:04 dnsmasq[9]: 3 127.0.0.1/47455 config <name unprintable> is NXDOMAIN
Dec  2 00:53:05 dnsmasq[9]: 4 127.0.0.1/34133 query[A] sub is x.allowed.test from 127.0.0.1
Dec  2 00:53:05 dnsmasq[9]: 4 127.0.0.1/34133 forwarded sub is x.allowed.test to 127.0.0.2
Dec  2 00:53:05 dnsmasq[9]: 4 127.0.0.1/34133 reply sub is x.allowed.test is 10.0.0.3
Dec  2 00:53:05 dnsmasq[9]: 5 127.0.0.1/34134 query[A] unanswered.test from 127.0.0.1
Dec  2 00:53:05 dnsmasq[9]: 6 127.0.0.1/34135 query[A] other.test from 127.0.0.1
Dec  2 00:53:05 dnsmasq[9]: 6 127.0.0.1/34135 forwarded allowed.test to 127.0.0.2
"""


def test_names_holding_spaces_count_as_the_name_asked_for() -> None:
    # The whole name is the one blocked, never the allowed name it starts with; a query
    # counts as allowed only from a line saying it was forwarded or answered, and only one
    # naming that query (not another name on its serial).
    assert parse_dns_log(HOSTILE_LOG) == (
        {"sub is x.allowed.test": 1},
        {"api.anthropic.com evil.test": 1, "allowed.test from x": 1,
         "<name unprintable>": 1})


def test_read_egress_report(tmp_path: Path) -> None:
    (tmp_path / "dns.log").write_text(LOG)
    (tmp_path / "refused.json").write_text(
        '{"v": 1, "rejected_packets": {"ipv4": 3, "ipv6": 1}, '
        '"addresses": {"10.0.0.9": 3, "fd31:0007:0000:0000:0000:0000:0000:0021": 1}}')
    (tmp_path / "status.json").write_text('{"ok": true}')
    report = read_egress_report(tmp_path)
    assert report.blocked == {"blocked.test": 2}
    assert report.refused_connections.total == 4 and report.refused_connections.recorded
    assert report.refused_connections.addresses == {"10.0.0.9": 3, "fd31:7::21": 1}
    assert report.status == {"ok": True}
    empty = read_egress_report(tmp_path / "missing")
    assert (empty.allowed, empty.blocked, empty.refused_connections.recorded) == ({}, {}, False)


def test_sidecar_exit_codes_match_the_script() -> None:
    script = (Path(__file__).parents[1] / "container" / "sidecar").read_text()
    codes = {int(c) for c in __import__("re").findall(r"\bfail (\d+) ", script)}
    assert codes == {int(c) for c in SandboxExit}
    assert describe(93) == "the firewall could not be set up (NET_ADMIN missing?)"
    assert describe(0) is None and describe(1) is None


def test_spec_refuses_root_and_bad_names(tmp_path: Path) -> None:
    base = dict(image="i", sidecar_image="s", name="n", command=("true",),
                policy=EgressPolicy(), out_dir=tmp_path)
    with pytest.raises(UserError, match="own image for its sidecar"):
        SandboxSpec(**{**base, "sidecar_image": ""})  # type: ignore[arg-type]
    with pytest.raises(UserError, match="must not run as root"):
        SandboxSpec(**base, agent_uid=0)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="bad environment variable name 'A-B'"):
        SandboxSpec(**base, secret_env={"A-B": "x"})  # type: ignore[arg-type]
    with pytest.raises(UserError, match="bad secret file path"):
        SandboxSpec(**base, secret_files={"../x": b""})  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"docker\.memory: bad size '4 gb'"):
        Limits(memory="4 gb")
    spec = SandboxSpec(**base, secret_env={"TOKEN": "s3cret"})  # type: ignore[arg-type]
    assert "s3cret" not in repr(spec)


def test_host_dns_servers(tmp_path: Path) -> None:
    from git_iterare.sandbox.hostnet import host_dns_servers

    plain = tmp_path / "resolv.conf"
    plain.write_text("# c\nnameserver 127.0.0.1\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\n"
                     "nameserver 10.0.0.2\nsearch x\nnameserver junk\n")
    assert host_dns_servers(plain, tmp_path / "none") == ("10.0.0.2", "fe80::1")
    stub = tmp_path / "stub.conf"
    stub.write_text("nameserver 127.0.0.53\noptions edns0\n")
    upstream = tmp_path / "upstream.conf"
    upstream.write_text("nameserver 192.168.1.1\nnameserver ::1\n")
    assert host_dns_servers(stub, upstream) == ("192.168.1.1",)
    assert host_dns_servers(tmp_path / "missing", upstream) == ()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"memory": "1k"}, "docker.memory must be at least 6m (Docker's minimum), got '1k'"),
    ({"memory": "6291455"}, "docker.memory must be at least 6m"),
    ({"memory": "0"}, "docker.memory must be at least 6m"),
    ({"memory": ""}, "docker.memory: bad size ''"),
    ({"memory": "4gb"}, "docker.memory: bad size '4gb'"),
    ({"cpus": 0.0}, "docker.cpus must be at least 0.01, got 0"),
    ({"cpus": 0.001}, "docker.cpus must be at least 0.01, got 0.001"),
    ({"cpus": float("nan")}, "docker.cpus must be at least 0.01, got nan"),
    ({"pids": 0}, "docker.pids must be from 16 to 4194304, got 0"),
    ({"pids": 15}, "docker.pids must be from 16 to 4194304, got 15"),
    ({"pids": 4194305}, "docker.pids must be from 16 to 4194304, got 4194305"),
])
def test_limits_out_of_range_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        Limits(**kwargs)
    assert caught.value.message.startswith(message)


@pytest.mark.parametrize("kwargs", [{"memory": "0"}, {"cpus": 0.0}, {"pids": 0}])
def test_zero_limit_says_how_to_lift_it(kwargs: dict) -> None:
    with pytest.raises(UserError) as caught:
        Limits(**kwargs)
    assert (caught.value.hint or "").startswith(
        "0 does not mean unlimited; for no practical limit use ")


def test_limits_at_the_edges_are_accepted() -> None:
    Limits(cpus=0.01, memory="6m", pids=16)
    Limits(cpus=64, memory="1024G", pids=4194304)
    assert Limits(memory="6291456").memory == "6291456"


@pytest.mark.parametrize(("size", "count"), [
    ("512", 512), ("512b", 512), ("2k", 2048), ("6M", 6 * 1024**2), ("4g", 4 * 1024**3)])
def test_memory_bytes(size: str, count: int) -> None:
    assert memory_bytes(size) == count


def test_more_cpus_than_the_engine_has_is_refused() -> None:
    Limits(cpus=2).check_engine_cpus(2)
    with pytest.raises(UserError, match=r"docker\.cpus is 1000 but the Docker engine has only "
                                        r"2 CPUs"):
        Limits(cpus=1000).check_engine_cpus(2)


def test_host_addresses_from_the_kernels_tables(tmp_path: Path) -> None:
    from git_iterare.sandbox.hostnet import host_addresses

    fib = tmp_path / "fib_trie"
    fib.write_text("Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 127.0.0.1\n        /32 host LOCAL\n"
                   "     |-- 192.0.2.2\n        /32 host LOCAL\n     |-- 192.0.2.0\n"
                   "        /24 link UNICAST\nLocal:\n     |-- 192.0.2.2\n"
                   "        /32 host LOCAL\n")
    inet6 = tmp_path / "if_inet6"
    inet6.write_text("00000000000000000000000000000001 01 80 10 80       lo\n"
                     "fd000000000000000000000000000002 02 40 00 80     eth0\n"
                     "fe8000000000000000fc00fffe000001 02 40 20 80     eth0\n")
    assert host_addresses(fib, inet6) == ("192.0.2.2", "fd00::2")
    assert host_addresses(tmp_path / "none", tmp_path / "none") == ()


@pytest.mark.parametrize("name", ["x.test\n", "a\n.b.test", "x.test\r"])
def test_a_name_with_a_line_break_is_refused(name: str) -> None:
    """``$`` also matches before a final newline: names are matched whole (found by an
    adversarial test, where such a name crashed the launch)."""
    with pytest.raises(UserError):
        validate_domain(name, "firewall.allowed_domains")


@pytest.mark.parametrize(("config", "gateway"), [
    ({"Subnet": "172.31.77.0/24"}, "172.31.77.1"),
    ({"Subnet": "172.31.77.0/24", "Gateway": "172.31.77.254"}, "172.31.77.254"),
    ({"Subnet": "fd77:ad::/64"}, "fd77:ad::1"),
    ({"Subnet": "10.9.9.9/32"}, None),
    ({}, None),
])
def test_gateway_of_an_ipam_entry(config: dict[str, str], gateway: str | None) -> None:
    from git_iterare.sandbox.networks import _gateway

    assert _gateway(config) == gateway
