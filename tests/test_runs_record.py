"""The run record value, its JSON and its transitions."""

from __future__ import annotations

import json

import pytest

from git_iterare.runs import record as r
from git_iterare.runs.record import CorruptRecord, InvalidTransition, RunRecord


def test_json_round_trip_keeps_unknown_fields() -> None:
    rec = RunRecord(id="a-0123abcd", name="a", status="running", policy={"p": 1},
                    tokens={"input": 3}, extra={"k": [1]},  # type: ignore[typeddict-unknown-key]
                    egress={"blocked": ["x.org"]})  # a key this version does not know, kept
    data = json.loads(rec.to_json())
    assert list(data)[:4] == ["v", "id", "name", "status"]
    data["future_field"] = {"x": 1}
    back = RunRecord.from_json(json.dumps(data).encode())
    assert back == rec
    assert back.unknown == {"future_field": {"x": 1}}
    assert json.loads(back.to_json()) == data


@pytest.mark.parametrize("raw, problem", [
    (b"{", "run.json is not valid JSON"),
    (b"[]", "run.json is not a JSON object"),
    (b'{"v": 2, "id": "a-0123abcd", "name": "a", "status": "created"}',
     "run.json has unknown format version 2"),
    (b'{"id": "a-0123abcd", "name": "a", "status": "created"}',
     "run.json has unknown format version None"),
    (b'{"v": 1, "name": "a", "status": "created"}', "run.json field 'id' is missing"),
    (b'{"v": 1, "id": "a-0123abcd", "name": "a", "status": "done"}',
     "run.json has unknown status 'done'"),
    (b'{"v": 1, "id": "a-0123abcd", "name": "a", "status": "created", "extra": []}',
     "run.json field 'extra' is not an object"),
])
def test_corrupt_json(raw: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecord) as info:
        RunRecord.from_json(raw, "a-0123abcd")
    assert info.value.problem.startswith(problem)
    assert info.value.exit_code == 1


def test_every_status_has_transitions_and_rank() -> None:
    assert set(r.TRANSITIONS) == set(r.STATUSES) == set(r.STATUS_RANK)
    for targets in r.TRANSITIONS.values():
        assert targets <= set(r.STATUSES)


@pytest.mark.parametrize("old, new", [
    ("created", "running"), ("running", "succeeded"), ("running", "timed-out"),
    ("succeeded", "merged"), ("failed", "merged"), ("merged", "cleaned"),
    ("lost", "succeeded"), ("stopped", "cleaned"), ("running", "running"),
])
def test_allowed(old: str, new: str) -> None:
    r.check_transition(old, new)


@pytest.mark.parametrize("old, new", [
    ("cleaned", "running"), ("merged", "running"), ("succeeded", "failed"),
    ("created", "succeeded"), ("cleaned", "merged"), ("running", "created"),
    ("running", "nonsense"),
])
def test_refused(old: str, new: str) -> None:
    with pytest.raises(InvalidTransition):
        r.check_transition(old, new)


def test_listing_cache_keys_follow_the_record() -> None:
    import dataclasses

    from git_iterare.runs.index import CACHE_KEYS

    assert ["v", *(f.name for f in dataclasses.fields(RunRecord)
                                 if f.name != "unknown")] == CACHE_KEYS
