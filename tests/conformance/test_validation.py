"""Validation at the call: TypeError for wrong types, ValueError for wrong values; nothing written."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Exponential, FakeClock, Fixed, Retry, SerializationError, TaskContext, TaskState
from conveyor._validate import check_queue, check_task_id
from conveyor.errors import ConfigurationError
from conveyor.model import MAX_PARTITIONS

NAN, INF = math.nan, math.inf


@pytest.fixture
def nothing_written(app: Conveyor) -> Iterator[None]:
    """Asserts, after the test, that no task was stored."""
    yield
    assert all(counts["total"] == 0 for counts in app.stats().values())


# -- task options (at registration and per enqueue) ------------------------------------------------

BAD_OPTIONS: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"max_retries": -1}, ValueError),
    ({"max_retries": 1.5}, TypeError),
    ({"max_retries": "3"}, TypeError),
    ({"max_retries": True}, TypeError),
    ({"timeout": -1}, ValueError),
    ({"timeout": 0}, ValueError),  # not "no limit", as elsewhere: that is None
    ({"timeout": NAN}, ValueError),
    ({"timeout": INF}, ValueError),
    ({"timeout": "10"}, TypeError),
    ({"retention": -1}, ValueError),
    ({"retention": INF}, ValueError),
    ({"retry_on": ()}, ValueError),
    ({"retry_on": [ValueError]}, TypeError),
    ({"retry_on": ValueError}, TypeError),
    ({"retry_on": (int,)}, TypeError),
    ({"retry_on": (ValueError("instance"),)}, TypeError),
    ({"priority": True}, TypeError),
    ({"priority": 1.0}, TypeError),
    ({"queue": "has space"}, ValueError),
    ({"queue": ""}, ValueError),
    ({"queue": "q" * 65}, ValueError),
    ({"queue": 7}, TypeError),
    ({"backoff": 5}, TypeError),
    ({"expires": -1}, ValueError),
    ({"expires": NAN}, ValueError),
    ({"expires": datetime(2030, 1, 1)}, ValueError),  # naive: ambiguous
    ({"expires": 1e300}, ValueError),  # ends past the year 9999, which no date shows
]

BAD_ENQUEUE_ONLY: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"delay": -1}, ValueError),
    ({"delay": NAN}, ValueError),
    ({"delay": INF}, ValueError),
    ({"delay": "5"}, TypeError),
    ({"delay": True}, TypeError),
    ({"eta": NAN}, ValueError),
    ({"eta": datetime(2030, 1, 1)}, ValueError),
    ({"eta": "tomorrow"}, TypeError),
    ({"delay": 5, "eta": 2_000_000_000.0}, ValueError),
    ({"delay": 1e308}, ValueError),  # past the year 9999: stored, no page nor command could show it
    ({"delay": 3e11}, ValueError),
    ({"eta": 1e13}, ValueError),
    ({"eta": -1e13}, ValueError),
    ({"task_id": ""}, ValueError),
    ({"task_id": "has space"}, ValueError),
    ({"task_id": "slash/not/allowed"}, ValueError),
    ({"task_id": "two~tildes~label"}, ValueError),
    ({"task_id": "tilde-then~" + "q" * 17}, ValueError),
    ({"task_id": "x" * 129}, ValueError),
    ({"task_id": 42}, TypeError),
    ({"unique_for": -1}, ValueError),
    ({"unique_for": NAN}, ValueError),
    ({"unique_key": 42}, TypeError),
    ({"colour": "blue"}, TypeError),
]


def _ids(cases: list[tuple[dict[str, Any], type[Exception]]]) -> list[str]:
    return [",".join(f"{k}={v!r}"[:40] for k, v in options.items()) for options, _ in cases]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queu": "mail"}, "unknown task option(s) for @app.task: queu (did you mean 'queue'?)"),
        ({"max_retry": 2}, "unknown task option(s) for @app.task: max_retry (did you mean 'max_retries'?)"),
        (
            {"unique_key": "k", "delay": 5},
            "unknown task option(s) for @app.task: delay, unique_key "
            "(delay, unique_key: an option of each enqueue, with_options(...) or app.enqueue)",
        ),
    ],
)
def test_an_option_registration_does_not_take_is_named(app: Conveyor, options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as refused:
        app.task(**options)
    assert str(refused.value) == message


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS, ids=_ids(BAD_OPTIONS))
def test_bad_task_option_at_registration_is_rejected(
    app: Conveyor, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):

        @app.task(**options)
        def handler() -> None: ...

    assert app.handler("handler") is None


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS + BAD_ENQUEUE_ONLY, ids=_ids(BAD_OPTIONS + BAD_ENQUEUE_ONLY))
def test_bad_option_to_app_enqueue_is_rejected_and_nothing_is_written(
    app: Conveyor, nothing_written: None, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        app.enqueue("job", args=[1], **options)


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS + BAD_ENQUEUE_ONLY, ids=_ids(BAD_OPTIONS + BAD_ENQUEUE_ONLY))
def test_bad_option_to_with_options_is_rejected_and_nothing_is_written(
    app: Conveyor, nothing_written: None, options: dict[str, Any], error: type[Exception]
) -> None:
    @app.task
    def job(n: int) -> None: ...

    with pytest.raises(error):
        job.with_options(**options).enqueue(1)


def test_task_id_and_queue_at_their_maximum_length_are_accepted(app: Conveyor) -> None:
    handle = app.enqueue("job", task_id="A-z.0:_" + "x" * 121, queue="Q-z.0_" + "q" * 58)
    assert app.get(handle.id).queue == "Q-z.0_" + "q" * 58


@pytest.mark.parametrize(("task_id", "queue"), [("order~42", "default"), ("y~emails", "default"), ("z~a|0", "b")])
def test_a_custom_id_naming_another_queues_place_is_refused_on_every_backend(
    app: Conveyor, nothing_written: None, task_id: str, queue: str
) -> None:
    """``~<label>`` names the queue an id belongs to (Redis routes by-id calls by it): the same ids
    are refused on memory and SQLite, so that a test on ``memory://`` meets what Redis refuses."""
    with pytest.raises(ValueError, match="use another character than '~' in your own ids"):
        app.enqueue("job", task_id=task_id, queue=queue)


@pytest.mark.parametrize(
    ("task_id", "queue"), [("x~default", "default"), ("y~a", "a"), ("long~" + "4c3d5fa0d9", "q" * 17)]
)
def test_a_custom_id_naming_its_own_queues_place_is_taken_on_every_backend(
    app: Conveyor, task_id: str, queue: str
) -> None:
    """An id Conveyor made (``<id>~<label>``) enqueued again in its queue; a queue name past 16
    characters is labelled by a digest of it."""
    if task_id.startswith("long~"):
        task_id = "long~" + hashlib.sha1(queue.encode()).hexdigest()[:10]
    handle = app.enqueue("job", task_id=task_id, queue=queue)
    assert app.get(handle.id).queue == queue


# -- arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [[NAN], [INF], [{"nested": [-INF]}], [object()], [{1, 2}], [b"bytes"], [{1: "int key"}], [1, [{"a": {2: "b"}}]]],
    ids=["nan", "inf", "nested-inf", "object", "set", "bytes", "int-key", "deep-int-key"],
)
def test_non_json_arguments_are_rejected_at_enqueue_and_nothing_is_written(
    app: Conveyor, nothing_written: None, args: list[Any]
) -> None:
    with pytest.raises(SerializationError):
        app.enqueue("job", args=args)


def test_non_json_keyword_argument_is_rejected_at_enqueue(app: Conveyor, nothing_written: None) -> None:
    @app.task
    def job(value: float) -> None: ...

    with pytest.raises(SerializationError):
        job.enqueue(value=NAN)
    with pytest.raises(SerializationError):  # json would quietly turn the key 1 into "1"
        app.enqueue("job", kwargs={"value": {"ok": [{1: "int key"}]}})


def test_serialization_error_is_a_value_error(app: Conveyor) -> None:
    with pytest.raises(ValueError):
        app.enqueue("job", args=[NAN])


@pytest.mark.parametrize(("args", "kwargs"), [("abc", {}), ({"a": 1}, {}), ((), [("k", 1)]), (1, {})])
def test_args_must_be_a_sequence_and_kwargs_a_dict(
    app: Conveyor, nothing_written: None, args: Any, kwargs: Any
) -> None:
    with pytest.raises(TypeError, match=r"^(args|kwargs) must be a "):  # not "'int' object is not iterable"
        app.enqueue("job", args=args, kwargs=kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, r"send\(\) missing 1 required positional argument: 'to'"),
        (("ada", "hi", "extra"), {}, r"send\(\) takes from 1 to 2 positional arguments but 3 were given"),
        (("ada",), {"cc": "bob"}, r"send\(\) got an unexpected keyword argument 'cc'"),
        (("ada",), {"to": "bob"}, r"send\(\) got multiple values for argument 'to'"),
    ],
    ids=["missing", "too-many", "unknown-keyword", "twice"],
)
def test_arguments_a_registered_handler_cannot_take_are_refused_at_enqueue(
    app: Conveyor, nothing_written: None, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    """Every way a producer with the handler enqueues it (the handler would fail on every attempt)."""

    @app.task
    def send(to: str, subject: str = "hi", *, urgent: bool = False) -> None: ...

    whole = rf"^task 'send' cannot take these arguments: {message}$"
    with pytest.raises(TypeError, match=whole):
        send.enqueue(*args, **kwargs)
    with pytest.raises(TypeError, match=whole):
        app.enqueue("send", args=list(args), kwargs=kwargs)
    with pytest.raises(TypeError, match=whole):
        send.with_options(delay=5).enqueue(*args, **kwargs)
    with pytest.raises(TypeError, match=whole):
        send.enqueue_many([(("ada",), {}), (args, kwargs)])


def test_arguments_are_checked_without_the_context_and_only_where_the_handler_is(app: Conveyor) -> None:
    @app.task
    def with_context(ctx: TaskContext, item: int) -> None: ...

    @app.task
    def anything(*args: Any, **kwargs: Any) -> None: ...

    with_context.enqueue(7)
    with pytest.raises(TypeError, match=r"with_context\(\) takes 1 positional argument but 2 were given"):
        with_context.enqueue(7, 8)  # type: ignore[call-arg]
    anything.enqueue(1, "two", three=3)
    producer = Conveyor(broker=app.broker)  # no handler here: the worker's failure will say it
    producer.enqueue("with_context", args=[7, 8])
    assert app.stats()["default"]["total"] == 3


@pytest.mark.parametrize(
    "calls",
    [[[1], [2]], [([1], {}), [1, 2]], [([1], {}), ((1,), {}, {})], [((), {}), ("ab", {})], [([1], {"k": 1}), 7]],
    ids=["args-alone", "two-values", "three-values", "string-args", "not-a-pair"],
)
def test_enqueue_many_names_a_call_that_is_not_an_args_kwargs_pair(
    app: Conveyor, nothing_written: None, calls: list[Any]
) -> None:
    with pytest.raises(TypeError, match=r"enqueue_many takes \(args, kwargs\) pairs, .*: call (\d+) is ") as refused:
        app.enqueue_many("job", calls)
    place = int(str(refused.value).split("call ")[1].split(" ")[0])
    assert place == (0 if calls[0] == [1] else 1), refused.value


@pytest.mark.parametrize(("name", "error"), [("", ValueError), ("has space", ValueError), (42, TypeError)])
def test_bad_task_name_is_rejected(app: Conveyor, nothing_written: None, name: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        app.enqueue(name)


# -- backoff, Retry, clock -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"factor": 0}, ValueError),
        ({"factor": -2}, ValueError),
        ({"factor": NAN}, ValueError),
        ({"initial": -1}, ValueError),
        ({"initial": INF}, ValueError),
        ({"initial": "1"}, TypeError),
        ({"max": -1}, ValueError),
        ({"max": NAN}, ValueError),
        ({"jitter": 1}, TypeError),
    ],
)
def test_bad_exponential_backoff_is_rejected(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Exponential(**kwargs)


@pytest.mark.parametrize(("seconds", "error"), [(-1, ValueError), (NAN, ValueError), ("1", TypeError)])
def test_bad_fixed_backoff_is_rejected(seconds: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        Fixed(seconds)


@pytest.mark.parametrize(("delay", "error"), [(-1, ValueError), (NAN, ValueError), (INF, ValueError), ("1", TypeError)])
def test_retry_with_a_bad_delay_is_rejected(delay: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        Retry(delay=delay)


@pytest.mark.parametrize("clock", [5, "now", 1.5])
def test_clock_must_be_callable(broker_url: str, clock: Any) -> None:
    with pytest.raises(TypeError):
        Conveyor(broker_url, clock=clock)


@pytest.mark.parametrize("argument", [{"clock": 5}, {"rng": 42}])
def test_a_bad_argument_is_refused_before_the_broker_opens(tmp_path: Path, argument: dict[str, Any]) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(TypeError):
        Conveyor(f"sqlite:///{path}", **argument)
    assert not path.exists()  # nothing was opened, so nothing is left open


# -- queues, leases, admin -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_size": -1}, ValueError),
        ({"max_size": "10"}, TypeError),
        ({"max_size": True}, TypeError),
        ({"concurrency": 0}, ValueError),
        ({"concurrency": 1.0}, TypeError),
        ({"max_size": 2**63}, ValueError),  # past what every backend stores exactly (SQLite, Lua numbers)
        ({"concurrency": 10**20}, ValueError),
        ({"aging": 0}, ValueError),
        ({"aging": -5}, ValueError),
        ({"aging": NAN}, ValueError),
        ({"aging": "slow"}, TypeError),
        ({"partitions": 0}, ConfigurationError),
        ({"partitions": MAX_PARTITIONS + 1}, ConfigurationError),
        ({"partitions": 2.0}, TypeError),
        ({"partitions": True}, TypeError),
    ],
)
def test_bad_queue_setting_is_rejected(app: Conveyor, settings: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        app.configure_queue("default", **settings)


def test_the_largest_counts_are_stored_exactly_and_one_more_is_refused(app: Conveyor) -> None:
    app.configure_queue("default", max_size=10**15, concurrency=10**15)
    settings = app.inspect.queue("default").settings
    assert (settings.max_size, settings.concurrency) == (10**15, 10**15)
    with pytest.raises(ValueError, match="must be <= 1,000,000,000,000,000"):
        app.configure_queue("default", max_size=10**15 + 1)
    with pytest.raises(ValueError, match="must be <= 1,000,000,000,000,000"):
        app.inspect.purge("default", "archived", limit=2**63)


@pytest.mark.parametrize(("name", "error"), [("bad name", ValueError), ("", ValueError), (None, TypeError)])
def test_bad_queue_name_is_rejected_everywhere(app: Conveyor, name: Any, error: type[Exception]) -> None:
    for call in (
        lambda: app.configure_queue(name),
        lambda: app.claim(queues=[name]),
        lambda: app.worker(queues=[name]),
        lambda: app.inspect.pause(name),
        lambda: app.inspect.list(name, "pending"),
    ):
        with pytest.raises(error):
            call()


@pytest.mark.parametrize(
    ("lease_for", "error"), [(0, ValueError), (-1, ValueError), (NAN, ValueError), ("30", TypeError)]
)
def test_claim_with_a_bad_lease_time_is_rejected(app: Conveyor, lease_for: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        app.claim(lease_for=lease_for)


@pytest.mark.parametrize(("seconds", "error"), [(0, ValueError), (-1, ValueError), (INF, ValueError), ("5", TypeError)])
def test_lease_extend_with_a_bad_time_is_rejected_and_keeps_the_lease(
    app: Conveyor, clock: FakeClock, seconds: Any, error: type[Exception]
) -> None:
    app.enqueue("external")
    lease = app.claim(lease_for=10)
    assert lease is not None
    with pytest.raises(error):
        lease.extend(seconds)
    assert app.get(lease.task.id).lease_expires_at == clock.now() + 10


def test_lease_complete_with_a_non_json_result_is_rejected_and_keeps_the_task_active(app: Conveyor) -> None:
    app.enqueue("external")
    lease = app.claim()
    assert lease is not None
    with pytest.raises(SerializationError):
        lease.complete(object())
    assert app.get(lease.task.id).state is TaskState.ACTIVE


@pytest.mark.parametrize(("state", "error"), [("finished", ValueError), (3, TypeError)])
def test_inspector_list_with_a_bad_state_is_rejected(app: Conveyor, state: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        app.inspect.list("default", state)


@pytest.mark.parametrize(("offset", "limit"), [(-1, 10), (0, 0)])
def test_inspector_list_with_a_bad_page_is_rejected(app: Conveyor, offset: int, limit: int) -> None:
    with pytest.raises(ValueError):
        app.inspect.list("default", "pending", offset=offset, limit=limit)


def test_get_with_a_non_str_id_is_a_type_error(app: Conveyor) -> None:
    with pytest.raises(TypeError):
        app.get(42)  # type: ignore[arg-type]


def test_a_long_bad_value_is_quoted_by_its_start_and_length() -> None:
    """A 5,000-character id pasted from a log was echoed whole in the error."""
    with pytest.raises(ValueError, match=r"got 'xxxx+'\.\.\. \(5000 characters\)$") as refused:
        check_task_id("x" * 5000)
    assert len(str(refused.value)) < 200
    with pytest.raises(ValueError, match=r"got 'a b'$"):
        check_queue("a b")


@pytest.mark.parametrize(
    ("arguments", "says"), [({"offset": 2**63}, "offset must be <="), ({"limit": 10**7}, "limit must be <=")]
)
def test_a_page_past_what_a_store_holds_is_refused(app: Conveyor, arguments: dict[str, int], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        app.inspect.list("default", "pending", **arguments)
