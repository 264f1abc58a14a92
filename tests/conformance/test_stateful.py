"""A Hypothesis state machine over the external-consumer API, checking the lifecycle invariants.

Rules: enqueue, claim, complete, fail, release, extend, use a fenced lease, expire leases (advance
past them and reap), advance the clock. Invariants after every step: each task is in exactly one
state; active ⇔ it holds a lease; a completed task never runs again; ``stats()`` counts equal the
listed tasks. Each example uses its own queue, so examples share one broker per backend.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from conveyor import Conveyor, FakeClock, Lease, LeaseLost, TaskNotFound, TaskState

LEASE_TIMES = (5.0, 20.0)
ACTIONS = st.sampled_from(["complete", "fail", "give_up", "release", "extend"])


def test_random_operations_keep_the_lifecycle_invariants(app: Conveyor, clock: FakeClock) -> None:
    queues = itertools.count()

    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.queue = f"sm{next(queues)}"
            self.ids: list[str] = []
            self.leases: dict[str, Lease] = {}  # the latest lease claimed per task
            self.fenced: list[Lease] = []  # leases superseded by a later claim of the same task
            self.completed: dict[str, int] = {}  # task id -> attempts when it completed

        @rule(delay=st.sampled_from([None, 0.0, 3.0]), priority=st.integers(-2, 2))
        def enqueue(self, delay: float | None, priority: int) -> None:
            self.ids.append(app.enqueue("manual", queue=self.queue, delay=delay, priority=priority).id)

        def _claim(self, lease_for: float) -> str | None:
            lease = app.claim(queues=[self.queue], lease_for=lease_for)
            if lease is None:
                return None
            task_id = lease.task.id
            assert task_id not in self.completed, "a completed task ran again"
            previous = self.leases.pop(task_id, None)
            if previous is not None:
                self.fenced.append(previous)
            self.leases[task_id] = lease
            return task_id

        @rule(lease_for=st.sampled_from(LEASE_TIMES))
        def claim(self, lease_for: float) -> None:
            self._claim(lease_for)

        @rule(action=ACTIONS)
        def claim_and_act_at_once(self, action: str) -> None:
            task_id = self._claim(LEASE_TIMES[0])
            if task_id is not None:
                self._act(task_id, action)

        @precondition(lambda self: self.leases)
        @rule(data=st.data(), action=ACTIONS)
        def act_on_a_held_lease(self, data: st.DataObject, action: str) -> None:
            # Insertion order, not sorted(): ids are random, so a sorted list would put a different task
            # at the same index when Hypothesis replays a prefix (FlakyStrategyDefinition).
            self._act(data.draw(st.sampled_from(list(self.leases))), action)

        def _act(self, task_id: str, action: str) -> None:
            lease = self.leases[task_id]
            before = app.get(task_id)
            current = before.state is TaskState.ACTIVE  # only this machine claims its queue
            try:
                if action == "complete":
                    lease.complete(task_id)
                elif action == "fail":
                    lease.fail("try again")
                elif action == "give_up":
                    lease.fail("no", retry=False)
                elif action == "release":
                    lease.release()
                else:
                    lease.extend(10.0)
            except LeaseLost:
                assert not current, f"{action} on the current lease raised LeaseLost"
                assert app.get(task_id) == before, "a fenced call changed the task"
                del self.leases[task_id]
                return
            assert current, f"{action} on a lost lease succeeded"
            after = app.get(task_id)
            if action == "extend":
                assert after.lease_expires_at == clock.now() + 10.0
                return
            del self.leases[task_id]
            if action == "complete":
                assert after.state is TaskState.COMPLETED
                self.completed[task_id] = after.attempts
            elif action == "release":
                assert (after.state, after.attempts) == (TaskState.PENDING, before.attempts - 1)

        @precondition(lambda self: self.fenced)
        @rule(data=st.data())
        def use_a_fenced_lease(self, data: st.DataObject) -> None:
            lease = data.draw(st.sampled_from(self.fenced))
            before = app.get(lease.task.id)
            try:
                lease.complete("stale")
            except LeaseLost:
                assert app.get(lease.task.id) == before
            else:
                raise AssertionError("a fenced lease completed its task")

        @rule()
        def expire_every_lease(self) -> None:
            clock.advance(max(LEASE_TIMES))
            app.broker.reap(clock.now())

        @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
        def advance_the_clock(self, seconds: float) -> None:
            clock.advance(seconds)

        @invariant()
        def each_task_is_listed_in_exactly_one_state(self) -> None:
            listed = {
                state: {info.id for info in app.inspect.list(self.queue, state, limit=1000)} for state in TaskState
            }
            for task_id in self.ids:
                states = [state for state, ids in listed.items() if task_id in ids]
                assert len(states) == 1, f"{task_id} listed in {states}"
                assert app.get(task_id).state is states[0]

        @invariant()
        def active_tasks_and_only_they_hold_a_lease(self) -> None:
            for task_id in self.ids:
                info = app.get(task_id)
                assert (info.state is TaskState.ACTIVE) == (info.lease_expires_at is not None), info

        @invariant()
        def a_completed_task_stays_completed_and_never_runs_again(self) -> None:
            for task_id, attempts in self.completed.items():
                try:
                    info = app.get(task_id)
                except TaskNotFound:  # past its retention
                    continue
                assert (info.state, info.attempts) == (TaskState.COMPLETED, attempts)

        @invariant()
        def stats_counts_equal_the_listed_tasks(self) -> None:
            counts = app.stats().get(self.queue)
            if counts is None:
                assert not self.ids
                return
            for state in TaskState:
                assert counts[state.value] == len(app.inspect.list(self.queue, state, limit=1000)), state
            assert counts["total"] == sum(counts[state.value] for state in TaskState) == len(self.ids)

    run_state_machine_as_test(
        Lifecycle, settings=settings(max_examples=25, stateful_step_count=25, deadline=None, database=None)
    )
