"""``redis://``'s codec on hand-written rows and replies: no server needed."""

from __future__ import annotations

import json
import logging
import re

import pytest

from conveyor.brokers.redis.codec import (
    ROW_NAMES,
    decode_body,
    decode_claimed,
    decode_record,
    encode_body,
    encode_one_task,
    encode_task,
    escape_key,
    split_due,
    unescape_key,
)
from conveyor.brokers.redis.scripts import read_source
from conveyor.model import ArchiveReason, ErrorEntry, NewTask, TaskState

NOW = 1_700_000_000.5
MEMBER = f"{42:016d}"  # a member's sequence, as the scripts write it
BODY = encode_body("job", "{}", "[]")


def row(**given: str) -> str:
    """A row as the scripts write it: a pending task enqueued at NOW, with ``given`` fields replaced."""
    fields = {
        **dict.fromkeys(ROW_NAMES, "-"),
        **{"s": "pending", "m": MEMBER + "t-1", "q": "emails", "a": "0", "c": "0", "l": "0", "ne": "0"},
        **{"r": "0", "st": "0", "pr": "0", "ea": repr(NOW), "fd": repr(NOW), "ra": repr(NOW), "b": BODY},
        **given,
    }
    return " ".join(fields.values())  # in ROW_NAMES order: the keys came from it first


@pytest.mark.parametrize(
    ("name", "options", "payload"),
    [
        ("job", "{}", "[[], {}]"),
        ("job", "", ""),
        ("mod:job<x>", '{"a":"\\n"}', ""),
        ("job", "", "line\nline\n"),
        ("job", "{\n}\n12\n", "\n\n3\nx"),
        ("job", "\x00{}\x00", "\x00not json{"),
        ("job", '{"é":"🙂"}', '["ünïcode 🙂", "\\u0000"]'),
    ],
)
def test_a_body_decodes_to_what_was_encoded(name: str, options: str, payload: str) -> None:
    body = encode_body(name, options, payload)
    assert body.startswith(name + "\n")
    assert decode_body(body) == (name, options, payload)


@pytest.mark.parametrize("body", ["", "job", "job\n", "job\n3", "job\nx\n{}", "job\n5\n{}", "job\n-1\n{}"])
def test_a_damaged_body_is_a_value_error(body: str) -> None:
    with pytest.raises(ValueError):
        decode_body(body)


def test_a_task_travels_as_eight_values_and_alone_without_its_trailing_defaults() -> None:
    usual = NewTask(id="a", name="job", queue="q", payload="[]")
    assert encode_task(usual) == ["a", "q", "job\n2\n{}[]", "0", "", "", "", ""]
    assert encode_one_task(usual) == ["a", "q", "job\n2\n{}[]"]
    expiring = NewTask(id="b", name="job", queue="q", payload="[]", options='{"x":1}', expires_at=NOW)
    assert encode_one_task(expiring) == ["b", "q", 'job\n7\n{"x":1}[]', "0", "", repr(NOW)]


@pytest.mark.parametrize(
    "key", ["plain", "key with  spaces ", "100%", "%20", "tab\tnew\nline\r\x0b\x0c", "-", "=", "ünï 🙂", "\x00"]
)
def test_a_unique_key_is_escaped_into_one_row_field_and_back(key: str) -> None:
    escaped = escape_key(key)
    assert escaped and escaped.split() == [escaped]  # one field: no whitespace of any kind
    assert unescape_key(escaped) == key
    assert encode_task(NewTask(id="a", name="job", queue="q", payload="[]", unique_key=key))[6] == "=" + escaped
    record = decode_record([row(uk="=" + escaped), None, None, [], None])
    assert record is not None and record.unique_key == key


def test_a_record_is_decoded_from_a_hand_written_row() -> None:
    text = row(s="archived", a="3", r="2", st="1", pr="-4", x="1700000100", sa="1700000001.25", fa="1700000002",
               ku="1700086402", ar="failed", l="1", ne="1", uu="1700000050", uk="=" + escape_key("key with  spaces "),
               b=encode_body("job", '{"max_retries":2}', '[[1], {"k": "v w"}]'))  # fmt: skip
    record = decode_record([text, None, "boom", ["1\t1700000000.75\tfirst", "3\t1700000002\tboom\twith tab"], None])
    assert record is not None
    assert (record.id, record.name, record.queue, record.state) == ("t-1", "job", "emails", TaskState.ARCHIVED)
    assert (record.options, record.payload) == ('{"max_retries":2}', '[[1], {"k": "v w"}]')
    assert (record.attempts, record.retries, record.stalls, record.priority) == (3, 2, 1, -4)
    assert (record.enqueued_at, record.first_due_at, record.expires_at) == (NOW, NOW, 1700000100.0)
    assert (record.started_at, record.finished_at, record.keep_until) == (1700000001.25, 1700000002.0, 1700086402.0)
    assert (record.archive_reason, record.unique_key, record.last_error) == (
        ArchiveReason.FAILED,
        "key with  spaces ",
        "boom",
    )
    assert record.errors == (ErrorEntry(1, 1700000000.75, "first"), ErrorEntry(3, 1700000002.0, "boom\twith tab"))
    assert (record.result, record.next_run_at, record.lease_token, record.lease_expires_at) == (None, None, None, None)


def test_a_record_reads_lease_and_next_run_only_in_the_states_they_belong_to() -> None:
    stale = {"tk": "tok-1", "lx": "1700000030", "c": "1", "nr": "1700000060"}
    active = decode_record([row(s="active", **stale), None, None, [], None])
    assert active is not None
    assert (active.lease_token, active.lease_expires_at, active.cancel_requested) == ("tok-1", 1700000030.0, True)
    assert active.next_run_at is None
    retry = decode_record([row(s="retry", **stale), None, None, [], None])
    assert retry is not None
    assert (retry.lease_token, retry.lease_expires_at, retry.cancel_requested) == (None, None, False)
    assert retry.next_run_at == 1700000060.0
    done = decode_record([row(s="completed", **stale), '{"ok": 1}', False, False, None])
    assert done is not None
    assert (done.result, done.last_error, done.errors, done.next_run_at) == ('{"ok": 1}', None, (), None)


@pytest.mark.parametrize("absent", [None, False])
def test_no_record_without_a_row(absent: bool | None) -> None:
    assert decode_record([absent, None, None, [], None]) is None


@pytest.mark.parametrize(
    "text", ["garbage", row()[: row().index(" " + BODY)], row(s="lost"), row(pr="x"), row(b="job\n9\n{}")]
)
def test_a_damaged_row_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        decode_record([text, None, None, [], None])


def test_claimed_tasks_carry_the_claims_own_writes(caplog: pytest.LogCaptureFixture) -> None:
    body = encode_body("job", '{"x":1}', "[]")
    extras = [3, "boom", ["2\t1700000000\tboom"], "1"]  # position 3's last error, failures, retry limit
    reply = [
        row(m=MEMBER + "first", a="0", x="1700000100", uk="=" + escape_key("u 1"), b=body),
        "garbage",
        row(m=MEMBER + "third", a="2", r="1", st="1", pr="5", tk="old", lx="1", nr="9", c="1", b=body),
        json.dumps(extras),
    ]
    with caplog.at_level(logging.ERROR, "conveyor.brokers.redis"):
        first, third = decode_claimed(reply, NOW + 1, 30.0, "base")
    assert "garbage" in caplog.text
    assert (first.id, first.name, first.options, first.payload, first.queue) == (
        "first",
        "job",
        '{"x":1}',
        "[]",
        "emails",
    )
    assert (first.state, first.attempts, first.started_at, first.lease_expires_at) == (
        TaskState.ACTIVE,
        1,
        NOW + 1,
        NOW + 31,
    )
    assert (first.lease_token, first.expires_at, first.unique_key, first.last_error, first.errors) == (
        "base-1",
        1700000100.0,
        "u 1",
        None,
        (),
    )
    assert (third.id, third.attempts, third.retries, third.stalls, third.priority) == ("third", 3, 1, 1, 5)
    assert (third.lease_token, third.cancel_requested, third.next_run_at) == ("base-3", False, None)  # position 3
    assert (third.last_error, third.errors) == ("boom", (ErrorEntry(2, 1700000000.0, "boom"),))
    assert (first.max_retries, third.max_retries) == (None, 1)
    assert (third.enqueued_at, third.first_due_at) == (NOW, NOW)


def test_an_empty_claim_reply_is_no_tasks() -> None:
    assert decode_claimed([], NOW, 30.0, "base") == []


def test_damaged_extras_leave_the_claimed_tasks_without_errors(caplog: pytest.LogCaptureFixture) -> None:
    reply = [row(m=MEMBER + "first", b=encode_body("job", "{}", "[]")), "[3, not json"]
    with caplog.at_level(logging.ERROR, "conveyor.brokers.redis"):
        (first,) = decode_claimed(reply, NOW, 30.0, "base")
    assert "cannot be decoded" in caplog.text
    assert (first.id, first.last_error, first.errors, first.lease_token) == ("first", None, (), "base-1")


def test_a_one_task_claim_reply_is_its_row_alone() -> None:
    (first,) = decode_claimed(row(m=MEMBER + "first", b=encode_body("job", "{}", "[]")), NOW, 30.0, "base")
    assert (first.id, first.name, first.lease_token, first.last_error) == ("first", "job", "base-1", None)
    assert decode_claimed("", NOW, 30.0, "base") == []


def test_a_short_claim_reply_ends_with_the_first_due_time() -> None:
    """claim.lua's "@<due>" tail: alone, after rows, and before the JSON array of errors."""
    one = row(m=MEMBER + "first", b=BODY)
    assert split_due("") == ("", None)
    assert split_due(one) == (one, None)
    assert split_due([one, "[]"]) == ([one, "[]"], None)
    assert split_due(f"@{NOW!r}") == ("", NOW)
    assert split_due([one, f"@{NOW!r}"]) == ([one, ""], NOW)
    assert split_due([one, one, f"@{NOW!r}\n[2, false]"]) == ([one, one, "[2, false]"], NOW)


def test_the_lua_row_layout_is_the_codecs() -> None:
    """``_rows.lua`` lists a row's fields once (``FIELDS``) and builds ``ROW``, the head patterns of
    ``claim.lua`` and ``settle.lua`` and a new task's row from it (a head out of its order does not load):
    in ``ROW_NAMES``'s order, with no pattern of a row spelled again elsewhere."""
    lib = read_source("_rows")
    (fields,) = re.findall(r"^ *local FIELDS = \{([^}]*)\}", lib, flags=re.MULTILINE)
    assert re.findall(r"'(\w+)'", fields) == list(ROW_NAMES[:-1])  # the body: the rest of the row
    heads = dict(re.findall(r"^ *(\w+_HEAD) = head\((\{.*\}), '\(\)'\)$", lib, flags=re.MULTILINE))
    assert sorted(heads) == ["CLAIM_HEAD", "SETTLE_HEAD"]
    for spec in heads.values():
        names = re.findall(r"'(\w+)'", spec)
        assert names == list(ROW_NAMES[: len(names)])
    for name in ("claim", "settle"):
        assert "%S" not in read_source(name)
        assert re.search(rf"string\.match\(row, {name.upper()}_HEAD\)", read_source(name))


def test_a_new_tasks_row_is_built_from_the_shared_layout() -> None:
    """``enqueue.lua`` writes a new task's row with ``_rows.lua``'s ``new_row``/``new_tail``, not by hand:
    the fields after ``x`` are ``NEW``'s, the values of a fresh row (the codec's, as ``row()`` has them),
    or those a task sets, ``NEW_SETS`` (their order is checked when the library loads), which are
    ``new_tail``'s parameters; ``FRESH``, what ``claim.lua`` compares such a row's head with, is built
    from ``NEW`` too."""
    lib, enqueue = read_source("_rows"), read_source("enqueue")
    (new,) = re.findall(r"^ *local NEW = \{([^}]*)\}", lib, flags=re.MULTILINE)
    fixed = dict(re.findall(r"(\w+) = '([^']*)'", new))
    fresh = dict(zip(ROW_NAMES, row().split(" ", len(ROW_NAMES) - 1), strict=True))
    assert {name: fresh[name] for name in fixed} == fixed  # counters and flags 0, the rest "-"
    (sets,) = re.findall(r"^ *local NEW_SETS = \{([^}]*)\}", lib, flags=re.MULTILINE)
    set_by_task = re.findall(r"'(\w+)'", sets)
    after_x = ROW_NAMES[ROW_NAMES.index("x") + 1 : -1]
    assert sorted([*fixed, *set_by_task]) == sorted(after_x)
    assert not set(fixed) & set(set_by_task)
    ((parameters, body),) = re.findall(r"^local function new_tail\(([^)]*)\)\n(.*?)^end$", lib, flags=re.M | re.S)
    assert parameters.split(", ") == set_by_task
    pieces = re.findall(r"r\[(\d+)\]\s*\.\.\s*(\w+)", body)  # each run of NEW_RUNS, then the value after it
    assert pieces == [(str(i), name) for i, name in enumerate(set_by_task, start=1)]
    assert re.search(rf"\.\. {set_by_task[-1]} \.\. r\[{len(set_by_task) + 1}\]\s*$", body)
    assert "new_tail(" in enqueue and "new_row(" in enqueue
    assert not re.search(r"'[ 0-]* 0 [ 0-]*'", enqueue)  # no fields of a row spelled out by hand
    assert "local FRESH =" not in lib and "FRESH = '- '" in lib
