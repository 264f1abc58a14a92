"""Generated task ids: 32 hex digits, wall-clock milliseconds first, unique under a frozen fake clock."""

from __future__ import annotations

import re
import time

import pytest

from conveyor import Conveyor, FakeClock
from conveyor._validate import check_task_id
from conveyor.ids import ID_LENGTH, id_millis, new_task_id

GENERATED = re.compile(r"[0-9a-f]{32}")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_an_id_is_32_lowercase_hex_digits_that_pass_the_id_check() -> None:
    task_id = new_task_id()
    assert len(task_id) == ID_LENGTH
    assert GENERATED.fullmatch(task_id), task_id
    assert check_task_id(task_id) == task_id


def test_an_id_starts_with_the_wall_clock_milliseconds() -> None:
    before = _wall_ms()
    task_id = new_task_id()
    after = _wall_ms()
    assert before <= id_millis(task_id) <= after


def test_ids_of_one_process_follow_the_order_they_were_made_in_to_the_millisecond() -> None:
    made: list[str] = []
    deadline = _wall_ms() + 5  # ids over several milliseconds, not only within one
    while _wall_ms() < deadline or len(made) < 1000:
        made.append(new_task_id())
    stamps = [id_millis(task_id) for task_id in made]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) > 1
    # ids of different milliseconds sort as text in the order they were made
    firsts = [made[stamps.index(stamp)] for stamp in sorted(set(stamps))]
    assert firsts == sorted(firsts)


def test_ids_made_in_one_millisecond_differ_in_their_random_part() -> None:
    made = [new_task_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    # 80 random bits: the tails alone are unique, and not a counter
    tails = [task_id[12:] for task_id in made]
    assert len(set(tails)) == len(tails)
    assert tails != sorted(tails)


def test_the_app_makes_ids_from_the_wall_clock_not_its_frozen_fake_clock(app: Conveyor, clock: FakeClock) -> None:
    before = _wall_ms()
    handles = [app.enqueue("job", [n]) for n in range(200)]  # the registered options as they are
    handles += [app.enqueue("job", [n], priority=3) for n in range(200)]  # with per-enqueue options
    handles += app.enqueue_many("job", [([n], {}) for n in range(1000)])
    handles += app.enqueue_many("job", [([n], {}) for n in range(500)], queue="other")
    after = _wall_ms()
    ids = [handle.id for handle in handles]
    assert clock.now() == 1_000_000.0  # the fake clock never moved
    assert len(set(ids)) == len(ids) == 1900
    # a broker that routes ids by queue (Redis, layout 5) has the app add ``~<label>`` (``LabelsIds``)
    assert all(re.fullmatch(r"[0-9a-f]{32}(~default|~other)?", task_id) for task_id in ids)
    assert all(before <= id_millis(task_id) <= after for task_id in ids)
    assert all(app.get(task_id).id == task_id for task_id in ids[::97])


def test_the_id_check_takes_a_generated_id_routed_by_its_queues_label() -> None:
    """Ids take ``<id>~<label>`` (a broker that routes ids by label makes them; given again as the
    ``task_id`` option, the app keeps them to a queue of that label: ``test_redis_labels.py``)."""
    routed = new_task_id() + "~default"
    assert check_task_id(routed) == routed
    assert check_task_id("order-42~a.b_c-9") == "order-42~a.b_c-9"
    for bad in ("~default", "abc~", "a~b~c", "abc~" + "q" * 17, "abc~has/slash"):
        with pytest.raises(ValueError):
            check_task_id(bad)


def test_a_custom_id_is_kept_as_given(app: Conveyor) -> None:
    assert app.enqueue("job", [1], task_id="order-42").id == "order-42"
    assert app.enqueue("job", [2], task_id="A" * 40).id == "A" * 40
