"""Runtime services one at a time: queue order, middleware, graceful shutdown, settings."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from conveyor import ArchiveReason, Conveyor, FakeClock, Middleware, TaskContext, TaskState, Worker, WorkerConfig
from conveyor.brokers.base import Broker
from conveyor.errors import BrokerUnavailable, ConfigurationError
from conveyor.model import Outcome
from conveyor.testing import Call, SpyBroker, poll_until
from conveyor.worker.acker import Acker
from conveyor.worker.args import config_from_args, config_to_args, parse
from conveyor.worker.buffer import Buffer
from conveyor.worker.config import parse_queues, unknown_env
from conveyor.worker.fetcher import Fetcher, QueueOrder
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.loader import load_app
from conveyor.worker.service import RetryDelay

Start = Callable[..., Worker]


def test_weighted_queue_order_follows_the_weights() -> None:
    order = QueueOrder(["emails", "default"], [3, 1], strict=False, rng=random.Random(7))
    firsts = Counter(order.next()[0] for _ in range(4000))
    assert 0.72 < firsts["emails"] / 4000 < 0.78


def test_every_fetch_visits_every_queue_once() -> None:
    order = QueueOrder(["a", "b", "c"], [5, 3, 1], strict=False, rng=random.Random(1))
    assert all(sorted(order.next()) == ["a", "b", "c"] for _ in range(100))


def test_strict_order_is_the_order_given() -> None:
    order = QueueOrder(["a", "b"], [1, 9], strict=True, rng=random.Random(1))
    assert {tuple(order.next()) for _ in range(50)} == {("a", "b")}


def test_middleware_hooks_nest_around_each_task(live_app: Conveyor) -> None:
    calls: list[str] = []

    class Recorder(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def before(self, ctx: TaskContext) -> None:
            calls.append(f"{self.name}.before")

        def after(self, ctx: TaskContext, outcome: Outcome) -> None:
            calls.append(f"{self.name}.after:{outcome.kind}")

        def on_error(self, ctx: TaskContext, exc: BaseException) -> None:
            calls.append(f"{self.name}.on_error:{type(exc).__name__}")

    @live_app.task(max_retries=0)
    def boom() -> None:
        calls.append("handler")
        raise KeyError("x")

    boom.enqueue()
    worker = live_app.worker(middleware=[Recorder("a"), Recorder("b")])
    assert worker.process_next()
    assert calls == [
        "a.before",
        "b.before",
        "handler",
        "b.on_error:KeyError",
        "a.on_error:KeyError",
        "b.after:archive",
        "a.after:archive",
    ]


def test_a_raising_middleware_never_changes_the_outcome(live_app: Conveyor) -> None:
    class Broken(Middleware):
        def before(self, ctx: TaskContext) -> None:
            raise RuntimeError("metrics down")

    @live_app.task
    def ok() -> int:
        return 1

    handle = ok.enqueue()
    live_app.worker(middleware=[Broken()]).run_until_idle()
    assert handle.result(timeout=1) == 1


def test_middleware_is_told_of_every_claim_the_running_worker_makes(live_app: Conveyor, start_worker: Start) -> None:
    claims: list[tuple[list[str], float, int]] = []

    class Claims(Middleware):
        def on_claim(self, queues: Sequence[str], seconds: float, claimed: int) -> None:
            claims.append((list(queues), seconds, claimed))

    @live_app.task
    def job() -> None:
        pass

    job.enqueue_many([((), {})] * 5)
    start_worker(queues=["default", "other"], strict=True, middleware=[Claims()])
    poll_until(lambda: live_app.stats()["default"]["completed"] == 5, message="five completed")
    poll_until(lambda: any(claimed == 0 for _, _, claimed in claims), message="an empty claim")
    assert sum(claimed for _, _, claimed in claims) == 5
    assert all(queues == ["default", "other"] and seconds >= 0 for queues, seconds, _ in list(claims))


def test_shutdown_releases_prefetched_tasks_at_once(live_app: Conveyor, start_worker: Start) -> None:
    gate = threading.Event()

    @live_app.task
    def hold() -> str:
        gate.wait(5)
        return "ok"

    handles = [hold.enqueue() for _ in range(3)]
    worker = start_worker(concurrency=1, prefetch=2, shutdown_grace=5.0)
    poll_until(lambda: live_app.stats()["default"]["active"] == 3, message="three claimed")
    worker.stop()
    poll_until(lambda: live_app.stats()["default"]["pending"] == 2, message="prefetched released")
    assert live_app.stats()["default"]["active"] == 1
    gate.set()
    poll_until(lambda: live_app.stats()["default"]["completed"] == 1, message="running task finished")
    assert sorted(h.status().attempts for h in handles) == [0, 0, 1]


def test_shutdown_releases_running_tasks_after_the_grace(live_app: Conveyor, start_worker: Start) -> None:
    running, saw_lost = threading.Event(), threading.Event()

    @live_app.task
    def stubborn(ctx: TaskContext) -> None:
        running.set()
        while not ctx.lease_lost:
            threading.Event().wait(0.01)
        saw_lost.set()

    handle = stubborn.enqueue()
    worker = start_worker(shutdown_grace=0.1)
    # running, not only claimed (ACTIVE): a task claimed but not started when the worker stops is
    # released as prefetched, and its handler never runs
    assert running.wait(10)
    worker.stop()
    poll_until(lambda: handle.status().state is TaskState.PENDING, message="released")
    assert saw_lost.wait(5)
    assert handle.status().attempts == 0


def test_parse_queues_reads_weights() -> None:
    assert parse_queues("emails=3, default=1") == (("emails", "default"), (3, 1))
    assert parse_queues("a,b") == (("a", "b"), None)


def test_config_from_env() -> None:
    env = {
        "CONVEYOR_WORKER_CONCURRENCY": "20",
        "CONVEYOR_WORKER_QUEUES": "emails=3,default=1",
        "CONVEYOR_WORKER_LEASE_FOR": "4",
        "CONVEYOR_WORKER_STRICT": "true",
        "CONVEYOR_WORKER_CLAIMERS": "3",
    }
    config = WorkerConfig.from_env(env, prefetch=2)
    assert (config.concurrency, config.queues, config.weights) == (20, ("emails", "default"), (3, 1))
    assert config.claimers == 3 and WorkerConfig().claimers is None
    assert config_from_args(parse(["pkg:app", *config_to_args(config)]), WorkerConfig()).claimers == 3
    assert (config.lease_for, config.heartbeat_every, config.strict, config.prefetch) == (4.0, 0.8, True, 2)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CONVEYOR_WORKER_CONCURRENCY": "0"}, "CONVEYOR_WORKER_CONCURRENCY='0': concurrency must be >= 1, got 0"),
        ({"CONVEYOR_WORKER_GRACE": "-5"}, "CONVEYOR_WORKER_GRACE='-5': shutdown_grace must be finite and >= 0"),
        ({"CONVEYOR_WORKER_QUEUES": "a=0"}, "CONVEYOR_WORKER_QUEUES='a=0': queue weight must be >= 1, got 0"),
    ],
)
def test_a_value_out_of_range_in_the_environment_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        WorkerConfig.from_env(env)
    assert str(refused.value).startswith(message)


def test_default_recovery_bound_is_at_most_15_seconds() -> None:
    config = WorkerConfig()
    assert config.lease_for + config.reaper_interval + config.poll_interval <= 15


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"concurrency": 0}, ValueError),
        ({"concurrency": 1.5}, TypeError),
        ({"weights": (1,)}, ValueError),
        ({"lease_for": 1.0, "heartbeat_interval": 2.0}, ValueError),
        ({"shutdown_grace": -1}, ValueError),
        ({"claimers": 0}, ValueError),
        ({"claimers": 2.0}, TypeError),
        ({"summary_interval": -1}, ValueError),
        ({"summary_interval": "10"}, TypeError),
    ],
)
def test_config_rejects_bad_settings(settings: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        WorkerConfig(queues=("a", "b"), **settings)  # type: ignore[arg-type]


def test_load_app_names_what_is_wrong() -> None:
    with pytest.raises(ConfigurationError, match="cannot import"):
        load_app("no_such_module_xyz:app")
    with pytest.raises(ConfigurationError, match="not a Conveyor"):
        load_app("conveyor:Worker")


def test_retry_delay_doubles_up_to_its_cap_with_jitter_and_resets() -> None:
    retry = RetryDelay(0.1, 1.0)
    waits = [retry.next() for _ in range(8)]
    caps = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(cap / 2 <= wait <= cap for wait, cap in zip(waits, caps, strict=True))
    retry.reset()
    assert 0.05 <= retry.next() <= 0.1


def test_middleware_references_survive_the_trip_to_child_arguments() -> None:
    ref = "conveyor.metrics:Metrics"  # any importable object: the round trip only carries the reference
    config = config_from_args(parse(["pkg:app", "--middleware", ref]), WorkerConfig())
    assert config.middleware_refs == (ref,)
    args = config_to_args(config)
    assert args[args.index("--middleware") + 1] == ref
    again = config_from_args(parse(["pkg:app", *config_to_args(config)]), WorkerConfig())
    assert again.middleware_refs == (ref,) and len(again.middleware) == 1


def test_heartbeat_leaves_fresh_leases_alone_and_extends_older_ones() -> None:
    clock = FakeClock(1000.0)
    app = Conveyor("memory://", clock=clock)

    @app.task
    def job() -> None: ...

    fresh_handle, old_handle = job.enqueue(), job.enqueue()
    records = app.broker.claim(["default"], clock.now(), 5.0, limit=2)
    inflight = Inflight()
    fresh, old = sorted(inflight.add(records), key=lambda h: h.id != fresh_handle.id)
    old.renewed -= 1.5  # renewed 1.5 s ago: older than one 1 s interval
    clock.advance(0.5)
    Heartbeat(app.broker, app.clock, inflight, interval=1.0, lease_for=10.0).tick()
    assert fresh_handle.status().lease_expires_at == 1005.0  # as claimed
    assert old_handle.status().lease_expires_at == 1010.5  # extended: now + lease_for
    assert old.renewed > fresh.renewed - 1.0

    # when lease_for leaves no margin for a skipped tick, every lease is extended every tick
    Heartbeat(app.broker, app.clock, inflight, interval=4.0, lease_for=8.0).tick()
    assert fresh_handle.status().lease_expires_at == 1008.5


def test_a_heartbeat_that_cannot_reach_the_store_says_so_in_one_line_a_tick(caplog: pytest.LogCaptureFixture) -> None:
    """Every held lease fails alike while the store is out of reach: one WARNING line for the tick,
    without a traceback, not one per task (a worker of 100 slots would write 100 a tick)."""
    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy, clock=FakeClock(0.0))
    for _ in range(5):
        app.enqueue("job")
    inflight = Inflight()
    helds = inflight.add(spy.claim(["default"], 0.0, 5.0, limit=5))
    for held in helds:
        held.renewed -= 10.0
    spy.fail("extend", BrokerUnavailable("Redis is unreachable"), times=None)
    with caplog.at_level("DEBUG", logger="conveyor"):
        Heartbeat(spy, app.clock, inflight, interval=1.0, lease_for=10.0).tick()
    lines = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert lines == [("WARNING", "heartbeat: could not extend 5 lease(s): Redis is unreachable; retrying", None)]
    assert not any(held.lost for held in helds)


def test_a_heartbeat_after_a_finished_task_settled_reports_no_lost_lease(caplog: pytest.LogCaptureFixture) -> None:
    """The tick's snapshot holds a task whose outcome the acker settles before its extend: the
    extend finds no lease, yet the task ran and settled; only a task still running has lost it."""
    app = app_with_jobs(2)
    inflight = Inflight()
    done, running = inflight.add(app.broker.claim(["default"], 0.0, 5.0, limit=2))
    inflight.finish(done)
    for held in (done, running):
        assert app.broker.settle([Outcome(held.id, held.token, "complete", result="null")], 0.5)
    heartbeat = Heartbeat(app.broker, app.clock, inflight, interval=1.0, lease_for=10.0)
    with caplog.at_level("DEBUG", logger="conveyor"):
        heartbeat.renew(done)
        heartbeat.renew(running)
    assert not done.lost and running.lost
    lost = [r.getMessage() for r in caplog.records if "lease-lost" in r.getMessage()]
    assert len(lost) == 1 and running.id in lost[0] and done.id not in lost[0]


def test_a_task_claimed_again_cancels_its_old_handler_whose_done_callback_updates_the_inflight() -> None:
    """``add`` cancels the old async handler's future; its done callbacks (the pool's calls ``remove``)
    run in the claiming thread then, so the lock must be free by that time."""
    app = app_with_jobs(1)
    inflight = Inflight()
    (old,) = inflight.add(app.broker.claim(["default"], 0.0, 5.0, limit=1))
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    old.run_async(future)
    future.add_done_callback(lambda _: inflight.remove([old]))
    assert app.broker.reap(6.0) == 1
    records = app.broker.claim(["default"], 6.0, 5.0, limit=1)
    claimer = threading.Thread(target=inflight.add, args=(records,), daemon=True)
    claimer.start()
    claimer.join(5)
    assert not claimer.is_alive(), "add() deadlocked on its own lock"
    assert old.lost and future.cancelled()
    (new,) = inflight.snapshot()
    assert new.token == records[0].lease_token and not new.lost


def test_a_finished_task_claimed_again_before_its_acker_removed_it_counts_as_busy_again() -> None:
    """Its outcome was with the acker when the lease was reclaimed (a settle slower than the lease):
    the new execution occupies a slot, and the old one's late ``remove`` changes no count."""
    app = app_with_jobs(1)
    inflight = Inflight()
    (old,) = inflight.add(app.broker.claim(["default"], 0.0, 5.0, limit=1))
    inflight.finish(old)
    assert inflight.busy() == 0
    assert app.broker.reap(6.0) == 1
    (new,) = inflight.add(app.broker.claim(["default"], 6.0, 5.0, limit=1))
    assert inflight.busy() == 1
    inflight.remove([old])  # the acker, once its fenced settle returned
    assert inflight.busy() == 1
    inflight.finish(new)
    inflight.remove([new])
    assert (inflight.busy(), len(inflight)) == (0, 0)


def app_with_jobs(count: int, spy: SpyBroker[Broker] | None = None) -> Conveyor:
    """A memory app on a FakeClock at 0 with ``count`` pending no-op tasks in queue ``default`` (its broker
    seen through ``spy``, if given)."""
    clock = FakeClock(0.0)
    app = Conveyor("memory://", clock=clock) if spy is None else Conveyor(broker=spy, clock=clock)

    @app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * count)
    return app


def test_finished_tasks_free_their_slot_and_held_tasks_stay_under_twice_the_capacity() -> None:
    app = app_with_jobs(50)
    inflight = Inflight()
    fetcher = Fetcher(app, WorkerConfig(concurrency=2, prefetch=2), inflight, Buffer())  # capacity 4
    assert fetcher.claimers == 1  # the default where claims take a lock anyway (memory, SQLite)
    assert len(fetcher.fetch(fetcher.room())) == 4
    assert fetcher.room() == 0
    for held in inflight.snapshot()[:3]:
        inflight.finish(held)  # ran; the outcome is with the acker, not written yet
    assert (inflight.busy(), fetcher.room()) == (1, 3)
    assert len(fetcher.fetch(fetcher.room())) == 3
    assert (len(inflight), inflight.busy(), fetcher.room()) == (7, 4, 0)
    for held in inflight.snapshot():
        inflight.finish(held)  # everything ran, nothing was written (say the broker is down)
    assert (inflight.busy(), fetcher.room()) == (0, 1)  # 8 held at most: 2 x capacity
    inflight.remove(inflight.snapshot())  # written
    assert fetcher.room() == 4


def test_reservations_of_claims_in_flight_count_against_the_room() -> None:
    app = app_with_jobs(10)
    inflight = Inflight()
    assert inflight.reserve(4, 8) == 4  # a claim asks for all the room there is
    assert (inflight.room(4, 8), inflight.reserve(4, 8), inflight.reserved) == (0, 0, 4)
    inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=3), reserved=4)  # it got 3 of 4
    assert (len(inflight), inflight.reserved, inflight.room(4, 8)) == (3, 0, 1)
    assert inflight.reserve(4, 8) == 1
    inflight.release(1)  # that claim failed: its room is free again
    assert (inflight.reserved, inflight.room(4, 8)) == (0, 1)


def test_two_claimers_overlap_and_never_ask_for_more_than_the_room(spied_app: Conveyor, spy: SpyBroker[Broker]) -> None:
    @spied_app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * 50)
    inflight, buffer = Inflight(), Buffer()
    fetcher = Fetcher(spied_app, WorkerConfig(concurrency=4, prefetch=4, claimers=2), inflight, buffer)  # capacity 8
    assert len(fetcher.fetch(4)) == 4
    calls: list[tuple[int, int, int]] = []  # (limit, busy, reserved) when each claim was sent
    first_in, second_in = threading.Event(), threading.Event()
    overlapped: list[bool] = []

    def note(call: Call) -> None:
        calls.append((call.arguments["limit"], inflight.busy(), inflight.reserved))
        if len(calls) == 1:
            first_in.set()
            overlapped.append(second_in.wait(10.0))  # held until the second claim is sent
        else:
            second_in.set()

    spy.before("claim", note)
    fetcher.start()
    try:
        assert first_in.wait(5.0)
        for held in inflight.snapshot()[:2]:
            inflight.finish(held)  # two slots free while the first claim is still on its way
        assert second_in.wait(5.0)
        poll_until(lambda: len(inflight) == 10 and not inflight.reserved, message="both claims held")
    finally:
        fetcher.stop()
    assert overlapped == [True]
    assert calls == [(4, 4, 4), (2, 2, 6)]  # the second asked only for what the first left
    assert (inflight.busy(), len(inflight), inflight.reserved) == (8, 10, 0)
    assert len(buffer.close()) == 10


class CountingLock:
    """A lock that counts the acquires that timed out (someone else held it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.timeouts = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self.lock.acquire(blocking, timeout)
        self.timeouts += not got
        return got

    def release(self) -> None:
        self.lock.release()


def test_only_one_idle_claimer_waits_for_work(spied_app: Conveyor, spy: SpyBroker[Broker]) -> None:
    @spied_app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * 5)
    inflight = Inflight()
    fetcher = Fetcher(spied_app, WorkerConfig(concurrency=10, poll_interval=0.01, claimers=3), inflight, Buffer())
    assert len(fetcher.fetch(5)) == 5  # half the slots busy
    waiter = fetcher._waiter = CountingLock()  # type: ignore[assignment]
    calls: list[int] = []  # the limit of each claim
    in_second, go = threading.Event(), threading.Event()

    def note(call: Call) -> None:
        calls.append(call.arguments["limit"])
        if len(calls) == 2:  # the first claim found nothing: this one waited for work first
            in_second.set()
            go.wait(10.0)

    spy.before("claim", note)
    fetcher.start()
    try:
        assert in_second.wait(5.0)
        for held in inflight.snapshot():
            inflight.finish(held)  # room frees while that claimer still waits for work with its half
        timeouts = waiter.timeouts
        poll_until(lambda: waiter.timeouts >= timeouts + 4, message="the other claimers waiting their turn")
        assert len(calls) == 2  # none of them claimed meanwhile, though there was room
    finally:
        go.set()
        fetcher.stop()
    assert calls[:2] == [5, 5]


def waiting_for_room(inflight: Inflight, busy_below: int, held_below: int) -> tuple[threading.Thread, list[bool]]:
    """A thread in ``wait_room`` (10 s timeout), returned once it waits; its result lands in the list."""
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(inflight.wait_room(busy_below, held_below, timeout=10.0)))
    waiter.start()
    poll_until(lambda: inflight._wanted, interval=0.001, message="the thread to wait for room")
    return waiter, woke


def test_a_finished_task_wakes_a_fetcher_waiting_for_room() -> None:
    app = app_with_jobs(2)
    inflight = Inflight()
    first, _second = inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=2))
    waiter, woke = waiting_for_room(inflight, 2, 10)
    inflight.finish(first)
    waiter.join(timeout=5.0)
    assert woke == [True]  # woken by finish(), not by its 10 s timeout
    assert inflight.wait_room(1, 10, timeout=0.01) is False  # one still busy


def test_a_fetcher_waiting_for_room_wakes_on_the_finish_that_makes_room_after_a_reservation() -> None:
    app = app_with_jobs(3)
    inflight = Inflight()
    first, second, _third = inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=3))
    waiter, woke = waiting_for_room(inflight, 3, 10)  # needs one of the three to finish
    assert inflight.reserve(4, 10) == 1  # another claimer takes the room one slot more allows
    inflight.finish(first)  # room for that claim, none for the waiter yet: it wakes and waits again
    poll_until(lambda: inflight._wake_at == 2, message="the waiter waiting for a second finish")
    assert waiter.is_alive() and woke == []
    inflight.finish(second)
    waiter.join(timeout=5.0)
    assert woke == [True]  # woken by the second finish(), not by its 10 s timeout


def test_a_fetcher_held_back_by_the_bound_on_held_tasks_is_woken_when_the_acker_removes_one() -> None:
    app = app_with_jobs(2)
    inflight = Inflight()
    first, _second = inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=2))
    waiter, woke = waiting_for_room(inflight, 2, 2)  # a slot to spare once one finishes, but 2 held
    inflight.finish(first)  # a free slot; still 2 held (its outcome is with the acker): no room
    assert inflight.room(2, 2) == 0 and woke == []
    inflight.remove([first])  # settled
    waiter.join(timeout=5.0)
    assert woke == [True]  # woken by remove(), not by its 10 s timeout


def test_room_a_claim_left_unused_wakes_a_fetcher_waiting_for_room() -> None:
    app = app_with_jobs(1)
    inflight = Inflight()
    assert inflight.reserve(4, 8) == 4  # a claim in flight asks for all the room
    waiter, woke = waiting_for_room(inflight, 4, 8)
    inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=4), reserved=4)  # it found 1 task of 4
    waiter.join(timeout=5.0)
    assert woke == [True]  # woken by add(), not by its 10 s timeout


def test_the_claimer_holding_the_waiting_place_never_waits_to_top_up(monkeypatch: pytest.MonkeyPatch) -> None:
    app = app_with_jobs(0)
    inflight = Inflight()
    fetcher = Fetcher(app, WorkerConfig(concurrency=8, poll_interval=60.0), inflight, Buffer())  # min batch 2
    assert inflight.reserve(7, 16) == 7  # another claim is on its way, leaving room for 1 (< min batch)
    monkeypatch.setattr("conveyor.worker.fetcher.TOP_UP_WAIT", 30.0)
    started = time.monotonic()
    assert fetcher._reserve(top_up=False) == 1  # at once: it goes to wait for new work with that room
    assert time.monotonic() - started < 10.0
    inflight.release(1)
    monkeypatch.setattr("conveyor.worker.fetcher.TOP_UP_WAIT", 0.01)
    assert fetcher._reserve(top_up=True) == 0  # a busy claimer waits for a bigger batch instead


def test_buffer_hands_each_record_out_once_and_close_returns_the_rest() -> None:
    app = app_with_jobs(60)
    records = app.broker.claim(["default"], 0.0, 30.0, limit=60)
    buffer = Buffer()
    taken: list[str] = []
    lock = threading.Lock()

    def take(count: int) -> None:
        for _ in range(count):
            record = buffer.get()
            assert record is not None
            with lock:
                taken.append(record.id)

    threads = [threading.Thread(target=take, args=(10,)) for _ in range(5)]
    for thread in threads:
        thread.start()
    for start in range(0, 60, 15):  # sleeping takers are woken one at a time, as a chain
        buffer.put_many(records[start : start + 15])
    for thread in threads:
        thread.join(timeout=5)
        assert not thread.is_alive(), "a taker was never woken"
    assert len(taken) == len(set(taken)) == 50
    left = buffer.close()
    assert {r.id for r in left} == {r.id for r in records} - set(taken)
    assert buffer.get() is None


def test_acker_settles_every_outcome_submitted_from_many_threads_in_batches() -> None:
    spy = SpyBroker.from_url("memory://")
    app = app_with_jobs(400, spy)
    inflight = Inflight()
    helds = inflight.add(app.broker.claim(["default"], 0.0, 30.0, limit=400))
    acker = Acker(app, inflight)
    acker.start()

    def submit(part: list[Held]) -> None:
        for i, held in enumerate(part):
            acker.submit(held, Outcome(held.id, held.token, "complete", result="null"))
            if i % 20 == 19:
                time.sleep(0.0005)  # pauses: the acker takes what is there and goes back to sleep, often

    threads = [threading.Thread(target=submit, args=(helds[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    try:  # no wake-up lost: all of them land
        poll_until(lambda: acker.processed >= 400, timeout=10.0, interval=0.001, message="400 outcomes settled")
    finally:
        acker.stop()
    assert (acker.processed, acker.failed, len(inflight)) == (400, 0, 0)
    batches = [len(call.arguments["outcomes"]) for call in spy.calls_to("settle")]
    assert sum(batches) == 400 and max(batches) <= 256  # one settle per batch, at most _BATCH each
    assert all(app.broker.get(held.id, 0.0).state is TaskState.COMPLETED for held in helds)  # type: ignore[union-attr]


def test_config_from_env_takes_the_options_names_and_names_a_bad_variable() -> None:
    config = WorkerConfig.from_env({"CONVEYOR_WORKER_GRACE": "3", "CONVEYOR_WORKER_LEASE": "6"})
    assert (config.shutdown_grace, config.lease_for) == (3.0, 6.0)
    with pytest.raises(ConfigurationError, match=r"CONVEYOR_WORKER_CONCURRENCY='abc'"):
        WorkerConfig.from_env({"CONVEYOR_WORKER_CONCURRENCY": "abc"})
    with pytest.raises(ConfigurationError, match=r"CONVEYOR_WORKER_STRICT='maybe': not a yes/no value"):
        WorkerConfig.from_env({"CONVEYOR_WORKER_STRICT": "maybe"})
    with pytest.raises(ConfigurationError, match=r"CONVEYOR_WORKER_QUEUES=' , '"):
        WorkerConfig.from_env({"CONVEYOR_WORKER_QUEUES": " , "})
    assert WorkerConfig.from_env({"CONVEYOR_WORKER_STRICT": "off"}).strict is False
    with pytest.raises(ConfigurationError, match="set the same setting"):  # not one of them silently
        WorkerConfig.from_env({"CONVEYOR_WORKER_GRACE": "3", "CONVEYOR_WORKER_SHUTDOWN_GRACE": "5"})


def test_unknown_worker_variables_are_named_with_the_likely_one() -> None:
    env = {
        "CONVEYOR_WORKER_CONCURENCY": "4",
        "CONVEYOR_WORKER_URL": "memory://",
        "CONVEYOR_WORKER_GRACE": "1",
        "CONVEYOR_WORKER_MIDDLEWARE": "x:y",
        "CONVEYOR_URL": "memory://",
    }
    assert unknown_env(env) == [
        "CONVEYOR_WORKER_CONCURENCY is ignored: no worker setting reads it"
        " (did you mean 'CONVEYOR_WORKER_CONCURRENCY'?)",
        "CONVEYOR_WORKER_MIDDLEWARE is ignored: no worker setting reads it",
    ]


class LibraryTimeout(BaseException):
    """A library's ``BaseException`` subclass (as ``func_timeout.FunctionTimedOut`` is)."""


@pytest.mark.parametrize(
    ("raised", "kind", "error"),
    [
        (SystemExit(3), "sync", "SystemExit: 3"),
        (LibraryTimeout("too slow"), "sync", "LibraryTimeout: too slow"),
        (KeyboardInterrupt("from the handler"), "sync", "KeyboardInterrupt: from the handler"),
        (LibraryTimeout("too slow"), "async", "LibraryTimeout: too slow"),
        (asyncio.CancelledError("inner"), "async", "CancelledError: inner"),  # no one cancelled it
    ],
    ids=["sys-exit", "base-exception", "keyboard-interrupt", "async-base-exception", "async-own-cancel"],
)
def test_a_base_exception_out_of_a_handler_on_a_worker_thread_fails_only_its_task(
    live_app: Conveyor, start_worker: Callable[..., Worker], raised: BaseException, kind: str, error: str
) -> None:
    """It escaped the runner as a fault of the runtime: the task waited out its lease, ran again
    despite its retry budget and ended ``poison`` with its error lost. Not an ``Exception``, so not
    retried by the default ``retry_on``: archived ``permanent`` at once, with its error."""
    if kind == "sync":

        @live_app.task(name="odd", max_retries=3)
        def odd() -> None:
            raise raised

    else:

        @live_app.task(name="odd", max_retries=3)
        async def odd_async() -> None:
            raise raised

    @live_app.task
    def fine() -> str:
        return "ok"

    start_worker()
    broken, after = live_app.enqueue("odd"), fine.enqueue()
    poll_until(lambda: live_app.get(broken.id).state is TaskState.ARCHIVED, message="the odd task archived")
    info = live_app.get(broken.id)
    assert (info.archive_reason, info.last_error, info.attempts) == (ArchiveReason.PERMANENT, error, 1)
    assert after.result(timeout=10) == "ok"


class TestOutcome(BaseException):
    """What a test framework raises to end a test (``pytest.fail`` raises one)."""

    __test__ = False  # not a test class for pytest to collect


@pytest.mark.parametrize("raised", [TestOutcome("test failed"), SystemExit(0)], ids=["test-outcome", "sys-exit"])
def test_a_base_exception_on_the_main_thread_is_the_callers(app: Conveyor, raised: BaseException) -> None:
    """A steppable worker runs handlers in its caller's thread: a test framework's outcome, or
    ``sys.exit()`` from the caller's signal handler, goes on to the caller (a test must not pass
    because its handler's ``pytest.fail`` became an archived task)."""

    @app.task
    def strict() -> None:
        raise raised

    strict.enqueue()
    with pytest.raises(type(raised)):
        app.worker().process_next()
