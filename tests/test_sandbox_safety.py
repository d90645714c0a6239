"""Values the sandbox refuses whoever sets them: networks, mount sources and targets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.errors import UserError
from git_iterare.sandbox.safety import (
    check_network,
    check_source,
    check_target,
    known_sockets,
    network_driver_problem,
    normalize_target,
    workspace_targets,
)

NETWORK_HINT = " (leave docker.network unset or name a user-defined Docker network)"


@pytest.mark.parametrize(("value", "why"), [
    ("host", "the sandbox would share, and rewrite the firewall of, the host's own network"),
    ("  HOST\t", "the sandbox would share, and rewrite the firewall of, the host's own network"),
    ("None", "the sandbox needs a network of its own for its firewall"),
    ("container:db", "container: joins another container's or namespace's network, whose "
                     "firewall the sandbox would rewrite"),
    (" Container:db ", "container: joins another container's or namespace's network, whose "
                       "firewall the sandbox would rewrite"),
    ("service:web", "service: joins another container's or namespace's network, whose "
                    "firewall the sandbox would rewrite"),
    ("ns:/proc/1/ns/net", "ns: joins another container's or namespace's network, whose "
                          "firewall the sandbox would rewrite"),
])
def test_refused_networks(value: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        check_network(value, "docker.network")
    assert info.value.render() == (
        f"docker.network: network {value.strip()!r} is refused: {why}{NETWORK_HINT}")


@pytest.mark.parametrize("value", ["", "bridge", "my-net", "project_internet", " my-net "])
def test_accepted_networks(value: str) -> None:
    assert check_network(value) == value.strip()


def test_network_drivers() -> None:
    assert network_driver_problem("mynet", "bridge") is None
    assert network_driver_problem("abc123", "host") == (
        "network 'abc123' is the engine's host network, which would take the sandbox out of "
        "its own firewalled network namespace")
    assert network_driver_problem("abc123", "null") is not None


@pytest.mark.parametrize(("target", "message"), [
    ("/", "mounting over / is refused"),
    ("//", "mounting over / is refused"),
    ("/usr/local/sbin", "mounting over the system path /usr/local/sbin is refused (it could "
                        "replace the sandbox's own programs)"),
    ("/usr/../usr/bin/", "mounting over the system path /usr/bin is refused (it could "
                         "replace the sandbox's own programs)"),
    ("//etc", "mounting over the system path /etc is refused (it could replace the sandbox's "
              "own programs)"),
    ("/lib64", "mounting over the system path /lib64 is refused (it could replace the "
               "sandbox's own programs)"),
    ("/proc/sys", "mounting over the system path /proc/sys is refused (it could replace the "
                  "sandbox's own programs)"),
    ("/workspace", "/workspace is reserved for the sandbox"),
    ("/workspace/.git", "/workspace/.git is reserved for the sandbox"),
    ("/workspace/.git/hooks", "/workspace/.git/hooks is reserved for the sandbox"),
    ("/git", "/git is reserved for the sandbox"),
    ("/git/objects", "/git/objects is reserved for the sandbox"),
    ("/run/iterare", "/run/iterare is reserved for the sandbox"),
    ("/run/iterare/../iterare/policy.json", "/run/iterare/policy.json is reserved for the "
                                            "sandbox"),
])
def test_refused_targets(target: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        check_target(target, "entry")
    assert info.value.render() == f"entry: {message} (mount to a folder of its own such as /data)"


@pytest.mark.parametrize("target", ["/data", "/github", "/home/agent/.gitconfig", "/opt/cache",
                                    "/srv/x", "/var/cache/apt", "/gitlab", "/workspace/data",
                                    "/workspace/sub/dir", "/workspace/.gitignore-cache"])
def test_accepted_targets(target: str) -> None:
    assert check_target(target) == normalize_target(target)


def test_workspace_targets() -> None:
    assert workspace_targets(["/data", "/workspace/data", "/workspace/a/b", "/workspaces/x"]
                             ) == ["data", "a/b"]


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    """A listening unix socket in a folder of its own."""
    folder = tmp_path / "sockdir"
    folder.mkdir()
    path = folder / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    yield path
    server.close()


HINT = " (mount only the folder or file the agent needs)"


def _refusal(source: Path, **kwargs: object) -> str:
    kwargs.setdefault("home_dirs", [])
    kwargs.setdefault("sockets", [])
    with pytest.raises(UserError) as info:
        check_source(source, where="e", **kwargs)  # type: ignore[arg-type]
    return info.value.render()


def test_root_and_sockets(unix_socket: Path, tmp_path: Path) -> None:
    assert _refusal(Path("/")) == "e: mounting / is refused" + HINT
    assert _refusal(unix_socket) == (
        f"e: {unix_socket} is a socket; mounting sockets is refused (a socket such as "
        f"Docker's hands over control of the host)" + HINT)
    link = tmp_path / "innocent"
    link.symlink_to(unix_socket)
    assert _refusal(link) == (
        f"e: {link} (-> {unix_socket}) is a socket; mounting sockets is refused (a socket "
        f"such as Docker's hands over control of the host)" + HINT)
    assert _refusal(unix_socket.parent, sockets=[unix_socket]) == (
        f"e: {unix_socket.parent} holds the socket {unix_socket}; mounting it is refused" + HINT)
    assert _refusal(tmp_path, sockets=[unix_socket]).startswith(f"e: {tmp_path} holds the socket")


def test_known_sockets_come_from_the_environment(unix_socket: Path) -> None:
    found = known_sockets({"SSH_AUTH_SOCK": str(unix_socket)})
    assert unix_socket in found
    assert unix_socket in known_sockets({"DOCKER_HOST": f"unix://{unix_socket}"})
    assert Path("/nonexistent.sock") not in known_sockets(
        {"DOCKER_HOST": "unix:///nonexistent.sock"})


def test_the_docker_socket_through_a_symlink(tmp_path: Path) -> None:
    real = Path("/var/run/docker.sock")
    if not real.exists():
        pytest.skip("no Docker socket on this machine")  # the unix_socket case covers it
    link = tmp_path / "d.sock"
    link.symlink_to(real)
    assert "is a socket; mounting sockets is refused" in _refusal(link)


def test_home_and_its_parents(tmp_path: Path) -> None:
    home = tmp_path / "home" / "me"
    (home / "project").mkdir(parents=True)
    for source in (home, home.parent, tmp_path):
        what = "your home directory" if source == home else "a parent of your home"
        assert _refusal(source, home_dirs=[home]) == f"e: {source} is {what}; mounting it is " \
                                                     "refused" + HINT
    assert check_source(home / "project", home_dirs=[home], sockets=[]) == home / "project"


def test_the_real_home_is_found() -> None:
    from git_iterare.sandbox.safety import homes

    assert Path(os.environ["HOME"]).resolve() in homes()


@pytest.mark.parametrize(("source", "message"), [
    ("/etc", "is in the system directory /etc"),
    ("/etc/ssl", "is in the system directory /etc"),
    ("/proc/self", "is in the system directory /proc"),
    ("/dev", "is in the system directory /dev"),
    ("/sys/kernel", "is in the system directory /sys"),
    ("/run", "is in the system directory /run"),
    ("/boot", "is in the system directory /boot"),
    ("/usr", "is a system directory"),
    ("/usr/bin", "is a system directory"),
    ("/bin", "is a system directory"),
    ("/tmp", "is a system directory"),
    ("/var", "is a system directory"),
    ("/home", "is a system directory"),
    ("/root", "is a system directory"),
])
def test_system_directories(source: str, message: str) -> None:
    if not Path(source).exists():
        pytest.skip(f"{source} does not exist here")
    text = _refusal(Path(source))
    real = Path(source).resolve()
    shown = source if str(real) == source else f"{source} (-> {real})"
    assert text.startswith(f"e: {shown} "), text
    assert "refused" in text


def test_below_usr_is_allowed() -> None:
    assert check_source(Path("/usr/share"), home_dirs=[], sockets=[]) == Path("/usr/share")


def test_git_directory_in_or_above(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git_dir = repo / ".git"
    (git_dir / "hooks").mkdir(parents=True)
    (repo / "src").mkdir()
    for source in (repo, git_dir, git_dir / "hooks", tmp_path):
        assert _refusal(source, protected=[git_dir]) == (
            f"e: {source} holds or is in the repository's git directory {git_dir}; the agent "
            f"must never write it" + HINT)
    assert check_source(repo / "src", protected=[git_dir], home_dirs=[], sockets=[]) == (
        repo / "src")


def test_missing_source(tmp_path: Path) -> None:
    assert _refusal(tmp_path / "nope") == f"e: {tmp_path / 'nope'} does not exist"
