

def test_host_dns_servers(tmp_path: Path) -> None:
    from git_iterare.sandbox.docker_backend import host_dns_servers

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
