"""``QueueInfo.oldest_pending_at``: when the longest-waiting pending task became ready, on every path
into and out of ``pending`` (the dashboard's and the metrics' queue latency, and ``conveyor doctor``'s
stale-queue check, read it).

A task becomes ready when it is enqueued (now), when its due time comes (scheduled or retry: its
``next_run_at``, not the moment it is promoted), when its lease is released (now), when its lease
expires (the lease deadline) and when an operator runs it now; it stops waiting when it is claimed,
cancelled, deleted, archived, expires or is purged.
"""

from __future__ import annotations

from conveyor import Conveyor, FakeClock, Lease

Q = "latency"


def oldest(app: Conveyor) -> float | None:
    infos = [info for info in app.inspect.queues() if info.name == Q]
    return infos[0].oldest_pending_at if infos else None


def claim(app: Conveyor, lease_for: float = 30.0) -> Lease:
    lease = app.claim(queues=[Q], lease_for=lease_for)
    assert lease is not None
    return lease


def test_oldest_pending_follows_every_way_into_and_out_of_pending(app: Conveyor, clock: FakeClock) -> None:
    t0 = clock.now()
    assert oldest(app) is None
    a = app.enqueue("job", queue=Q).id
    assert oldest(app) == t0
    clock.advance(5)
    b, c = (h.id for h in app.enqueue_many("job", [((1,), {}), ((2,), {})], queue=Q))
    d = app.enqueue("job", queue=Q, delay=2).id  # due at t0 + 7
    assert oldest(app) == t0  # a scheduled task does not wait yet
    clock.advance(10)  # t0 + 15
    app.broker.promote(clock.now())  # d is ready since its due time, t0 + 7
    assert oldest(app) == t0
    assert claim(app).task.id == a
    assert oldest(app) == t0 + 5  # b and c
    lease_b, lease_c = claim(app), claim(app)
    assert {lease_b.task.id, lease_c.task.id} == {b, c}
    assert oldest(app) == t0 + 7  # d: its due time, not when it was promoted
    lease_b.release()  # b waits again from now
    assert oldest(app) == t0 + 7
    app.inspect.cancel(d)
    assert oldest(app) == t0 + 15  # b
    assert claim(app).task.id == b
    assert oldest(app) is None
    lease_c.fail("flaky")  # retry, due at a later time
    assert oldest(app) is None
    retry_at = app.get(c).next_run_at
    assert retry_at is not None
    clock.advance(retry_at - clock.now() + 1)
    app.broker.promote(clock.now())
    assert oldest(app) == retry_at
    lease_c = claim(app, lease_for=5)
    assert lease_c.task.id == c
    deadline = lease_c.expires_at
    clock.advance(6)
    app.broker.reap(clock.now())  # c's lease expired: it waits since its lease deadline
    assert oldest(app) == deadline


def test_oldest_pending_ignores_priority_and_admin_moves(app: Conveyor, clock: FakeClock) -> None:
    t0 = clock.now()
    low = app.enqueue("job", queue=Q).id
    clock.advance(3)
    high = app.enqueue("job", queue=Q, priority=5).id
    later = app.enqueue("job", queue=Q, delay=100).id
    assert claim(app).task.id == high  # claimed first, though newer
    assert oldest(app) == t0  # low still waits since t0
    clock.advance(2)  # t0 + 5
    app.inspect.run_now(later)  # ready from now
    assert oldest(app) == t0
    app.inspect.archive(low)
    assert oldest(app) == t0 + 5
    app.inspect.delete(later)
    assert oldest(app) is None
    expiring = app.enqueue("job", queue=Q, expires=1).id
    assert oldest(app) == t0 + 5
    clock.advance(2)
    app.broker.reap(clock.now())  # not started in time: archived expired
    assert app.get(expiring).state.value == "archived"
    assert oldest(app) is None
    for _ in range(3):
        app.enqueue("job", queue=Q)
    assert oldest(app) == t0 + 7
    app.inspect.purge(Q, "pending")
    assert oldest(app) is None


def test_tasks_enqueued_together_wait_from_their_call_until_the_last_one_leaves(
    app: Conveyor, clock: FakeClock
) -> None:
    """Tasks of one ``enqueue_many`` call (Redis keeps them as one group) leave ``pending`` one at a time,
    in any order and by every way; the call's ready time counts until the last of them is gone."""
    t0 = clock.now()
    calls: list[tuple[tuple[int], dict[str, object]]] = [((i,), {}) for i in range(7)]
    first = [h.id for h in app.enqueue_many("job", calls[:4], queue=Q)]
    prioritized = app.enqueue_many("job", calls[4:6], queue=Q, priority=3)  # same call time, another kind
    clock.advance(1)
    single = app.enqueue("job", queue=Q).id
    clock.advance(1)  # t0 + 2
    assert oldest(app) == t0
    assert {claim(app).task.id for _ in range(2)} == {h.id for h in prioritized}  # priority first
    assert oldest(app) == t0
    app.inspect.archive(first[3])
    app.inspect.cancel(first[2])
    app.inspect.delete(first[1])
    assert oldest(app) == t0  # first[0] still waits
    lease = claim(app)
    assert lease.task.id == first[0]
    assert oldest(app) == t0 + 1  # only the single task waits now
    lease.release()  # back in pending, waiting from now on its own
    assert oldest(app) == t0 + 1
    assert claim(app).task.id == first[0]  # it was enqueued before the single one
    assert claim(app).task.id == single
    assert oldest(app) is None
    later = [h.id for h in app.enqueue_many("job", calls, queue=Q, expires=5)]
    clock.advance(1)  # t0 + 3
    app.enqueue_many("job", calls[:2], queue=Q)
    assert oldest(app) == t0 + 2
    clock.advance(5)  # t0 + 8: the first call's tasks expire before they start
    app.broker.reap(clock.now())
    assert {app.get(i).state.value for i in later} == {"archived"}
    assert oldest(app) == t0 + 3
    app.inspect.purge(Q, "pending")
    assert oldest(app) is None
