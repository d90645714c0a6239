"""The approval store of ``git iterare trust``: canonical content, hashes, diffs, modes."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from git_iterare.sandbox import approvals as trust_module
from git_iterare.sandbox.approvals import (
    DOCKERFILE,
    MAX_APPROVAL_BYTES,
    TrustRequest,
    TrustStore,
    diff,
    merged,
    unapproved,
)

REQUEST = TrustRequest.build(
    {"mounts.volumes": ["/data:/data:ro"], "docker.network": "mynet"},
    "FROM git-iterare:latest\nRUN echo hi\n", ["NPM_TOKEN", "GH_TOKEN", "NPM_TOKEN"])


def test_build_sorts_and_deduplicates() -> None:
    assert list(REQUEST.settings) == ["docker.network", "mounts.volumes"]
    assert REQUEST.env == ("GH_TOKEN", "NPM_TOKEN")
    assert not REQUEST.empty
    assert TrustRequest.build().empty


def test_digest_is_of_the_exact_content() -> None:
    same = TrustRequest.build({"docker.network": "mynet", "mounts.volumes": ["/data:/data:ro"]},
                              "FROM git-iterare:latest\nRUN echo hi\n", ["NPM_TOKEN", "GH_TOKEN"])
    assert same.digest() == REQUEST.digest()
    assert len(REQUEST.digest()) == 64
    for changed in (
        TrustRequest.build(REQUEST.settings, "FROM git-iterare:latest\nRUN echo hi \n",
                           REQUEST.env),
        TrustRequest.build({**REQUEST.settings, "docker.network": "other"}, REQUEST.dockerfile,
                           REQUEST.env),
        TrustRequest.build(REQUEST.settings, REQUEST.dockerfile, ["NPM_TOKEN"]),
        TrustRequest.build(REQUEST.settings, None, REQUEST.env),
    ):
        assert changed.digest() != REQUEST.digest()


def test_non_utf8_dockerfile_bytes_round_trip(tmp_path: Path) -> None:
    text = b"FROM x\nRUN echo \xff\xfe\n".decode("utf-8", "surrogateescape")
    request = TrustRequest.build({}, text)
    store = TrustStore(tmp_path / "trust")
    store.save("/r", request)
    loaded = store.load("/r")
    assert loaded is not None and loaded.request == request
    assert loaded.request.dockerfile is not None
    assert loaded.request.dockerfile.encode("utf-8", "surrogateescape") == (
        b"FROM x\nRUN echo \xff\xfe\n")


def test_save_load_and_file_modes(tmp_path: Path) -> None:
    store = TrustStore(tmp_path / "config" / "iterare" / "trust")
    assert store.load("/src/project") is None
    approval = store.save("/src/project", REQUEST)
    path = store.path("/src/project")
    assert path.parent == tmp_path / "config" / "iterare" / "trust"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    doc = json.loads(path.read_text())
    assert (doc["v"], doc["repo"], doc["sha256"]) == (1, "/src/project", REQUEST.digest())
    assert store.load("/src/project") == approval
    assert store.path("/src/other") != path
    assert store.load("/src/other") is None


def test_unusable_files_count_as_no_approval(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    store.save("/r", REQUEST)
    path = store.path("/r")
    doc = json.loads(path.read_text())
    # The content was changed without the hash: not an approval of anything.
    doc["request"]["settings"]["docker.network"] = "evil"
    path.write_text(json.dumps(doc))
    assert store.load("/r") is None
    for text in ("not json", "[]", json.dumps({**doc, "v": 2}),
                 json.dumps({**doc, "request": {"settings": []}})):
        path.write_text(text)
        assert store.load("/r") is None
    # Another repository's approval copied under this name does not count either.
    store.save("/other", REQUEST)
    path.write_bytes(store.path("/other").read_bytes())
    assert store.load("/r") is None
    path.write_bytes(b" " * (MAX_APPROVAL_BYTES + 1))
    assert store.load("/r") is None


def test_revoke(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    assert store.revoke("/r") is False
    store.save("/r", REQUEST)
    assert store.revoke("/r") is True
    assert store.load("/r") is None
    assert not store.path("/r").exists()


def test_unapproved_names_each_changed_item(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    assert unapproved(REQUEST, None) == ["docker.network", "mounts.volumes", DOCKERFILE,
                                         "env GH_TOKEN", "env NPM_TOKEN"]
    approval = store.save("/r", REQUEST)
    assert unapproved(REQUEST, approval) == []
    assert unapproved(TrustRequest.build(), approval) == []
    # Fewer items than approved: nothing new is asked for.
    assert unapproved(TrustRequest.build({"docker.network": "mynet"}), approval) == []
    newer = TrustRequest.build({**REQUEST.settings, "mounts.volumes": ["/data:/data"]},
                               f"{REQUEST.dockerfile}RUN true\n", ["NPM_TOKEN", "AWS_KEY"])
    assert unapproved(newer, approval) == ["mounts.volumes", DOCKERFILE, "env AWS_KEY"]


def test_exact_values_not_equal_ones() -> None:
    from git_iterare.sandbox.approvals import Approval

    approval = Approval("/r", TrustRequest.build({"docker.cpus": 1}), "")
    assert unapproved(TrustRequest.build({"docker.cpus": 1.0}), approval) == ["docker.cpus"]
    assert unapproved(TrustRequest.build({"docker.cpus": True}), approval) == ["docker.cpus"]


def test_merged_keeps_earlier_env_names(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    first = store.save("/r", TrustRequest.build({"docker.dns": ["10.0.0.2"]}, None, ["A"]))
    second = merged(first, TrustRequest.build({}, "FROM x\n", ["B"]))
    assert second == TrustRequest.build({}, "FROM x\n", ["A", "B"])
    assert merged(None, REQUEST) == REQUEST


def test_diff_shows_what_changed(tmp_path: Path) -> None:
    store = TrustStore(tmp_path)
    approval = store.save("/r", REQUEST)
    assert diff(approval, REQUEST) == ""
    newer = TrustRequest.build(REQUEST.settings, "FROM git-iterare:latest\nRUN echo bye\n",
                               REQUEST.env)
    text = diff(approval, newer)
    assert text.splitlines() == [
        "--- approved", "+++ requested", "@@ -3,4 +3,4 @@", " Dockerfile:",
        "     FROM git-iterare:latest", "-    RUN echo hi", "+    RUN echo bye",
        " env: GH_TOKEN, NPM_TOKEN"]
    first = diff(None, REQUEST).splitlines()
    assert first[3:] == ["+" + line for line in REQUEST.lines()]


def test_diff_of_long_dockerfiles_aligns_only_what_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """difflib takes time quadratic in the lines (two Dockerfiles of 100,000 lines took
    more than ten minutes: test_repository_bounds.py holds the time). What both sides
    start and end with is set aside first; a middle longer than MAX_DIFF_LINES is one hunk
    replacing it whole."""
    monkeypatch.setattr(trust_module, "MAX_DIFF_LINES", 4)
    lines = [f"RUN echo {i}" for i in range(10)]
    approval = TrustStore(tmp_path).save("/r", TrustRequest.build({}, "\n".join(lines)))
    one = [*lines[:5], "RUN curl evil", *lines[6:]]
    assert diff(approval, TrustRequest.build({}, "\n".join(one))).splitlines() == [
        "--- approved", "+++ requested", "@@ -5,5 +5,5 @@",
        "     RUN echo 3", "     RUN echo 4", "-    RUN echo 5",
        "+    RUN curl evil", "     RUN echo 6", "     RUN echo 7"]
    every_other = [line if i % 2 else f"RUN true {i}" for i, line in enumerate(lines)]
    assert diff(approval, TrustRequest.build({}, "\n".join(every_other))).splitlines() == [
        "--- approved", "+++ requested", "@@ -1,11 +1,11 @@", " Dockerfile:",
        *(f"-    {line}" for line in lines[:9]), *(f"+    {line}" for line in every_other[:9]),
        "     RUN echo 9"]


def test_lines_are_readable() -> None:
    assert REQUEST.lines() == [
        'docker.network = "mynet"',
        'mounts.volumes = ["/data:/data:ro"]',
        "Dockerfile:",
        "    FROM git-iterare:latest",
        "    RUN echo hi",
        "env: GH_TOKEN, NPM_TOKEN",
    ]
