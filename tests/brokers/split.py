"""Layout 5's keys (``Keys5``: every queue a slot of its own, apart from the namespace slot) for the
tests of the calls layout 5 splits (``test_redis_slots.py``, ``test_redis_claims.py``), and a task
helper for them."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.keys import Keys5
from conveyor.model import NewTask

__all__ = ["NOW", "PerSlotBroker", "SplitKeys", "blocked_pops", "task", "url_of"]

NOW = 1_000_000.0

#: Keys of a namespace whose queues each have a slot of their own, ``{ns|label}:v5:``; a task id names
#: its queue's label after its last ``~``.
SplitKeys = Keys5


class PerSlotBroker(RedisBroker):
    """A broker that makes one call per slot on one server too, as on a cluster (where a take and its
    enqueue, or a claim over several slots, are a call each)."""

    @property
    def joins_slots(self) -> bool:
        return False


def task(
    task_id: str, *, run_at: float | None = None, expires_at: float | None = None, unique_key: str | None = None
) -> NewTask:
    """A task of the queue its id names; a unique key holds for 100 s."""
    return NewTask(
        id=task_id,
        name="job",
        queue=task_id.rpartition("~")[2],
        payload="[[], {}]",
        run_at=run_at,
        expires_at=expires_at,
        unique_key=unique_key,
        unique_until=None if unique_key is None else NOW + 100,
    )


def url_of(request: pytest.FixtureRequest) -> str:
    """The URL of a fixture parametrized ``"server"`` (a module's ``server`` fixture) or ``"cluster"``
    (a fresh namespace on the session's 3-master cluster)."""
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster_url"))
    return str(request.getfixturevalue("server").url)


def blocked_pops(broker: RedisBroker) -> int:
    """Clients blocked in a pop on the broker's server, or on all its cluster's masters."""
    client = broker.client
    if not isinstance(client, RedisCluster):
        return int(client.info("clients")["blocked_clients"])
    return sum(
        int(client.get_redis_connection(node).info("clients")["blocked_clients"]) for node in client.get_primaries()
    )
