"""How evenly a namespace spreads over a real 3-master cluster with a slot per queue (``SplitKeys``;
issue 33's spread figures): one queue of ``partitions=6`` puts each master between 20% and 47% of its
keys and a drain of it by one worker sends each master at least 15% of the commands (``INFO
commandstats`` deltas); 48 plain queues put at least 12% of the keys on each master."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.testing.redis_cluster import LocalCluster

from .split import SplitKeys

pytestmark = pytest.mark.slow


@pytest.fixture
def app(redis_cluster_url: str, clock: FakeClock) -> Iterator[Conveyor]:
    config = RedisConfig.from_url(redis_cluster_url)
    application = Conveyor(broker=RedisBroker(config, keys=SplitKeys(config.namespace)), clock=clock)
    application.task(name="job")(lambda n: n)
    try:
        yield application
    finally:
        application.close()


def _shares(counts: list[int]) -> list[float]:
    total = sum(counts)
    assert total > 0
    return [count / total for count in counts]


def _keys(cluster: LocalCluster, app: Conveyor) -> list[float]:
    """Each master's share of the namespace's queue-slot keys (``{ns|...}``)."""
    assert isinstance(app.broker, RedisBroker)
    pattern = "{" + app.broker.keys.namespace + "|*"
    return _shares([sum(1 for _ in node.client().scan_iter(match=pattern, count=1000)) for node in cluster.masters])


def _calls(cluster: LocalCluster) -> list[int]:
    """Commands each master has run (``INFO commandstats``)."""
    stats = [node.client().info("commandstats") for node in cluster.masters]
    return [sum(int(entry["calls"]) for entry in info.values()) for info in stats]


def test_a_queue_of_six_partitions_spreads_its_keys_and_its_drain_over_three_masters(
    app: Conveyor, redis_cluster: LocalCluster
) -> None:
    app.configure_queue("hot", partitions=6)
    for start in range(0, 600, 100):
        app.enqueue_many("job", [([n], {}) for n in range(start, start + 100)], queue="hot")
    keys = _keys(redis_cluster, app)
    assert all(0.20 <= share <= 0.47 for share in keys), keys
    before = _calls(redis_cluster)
    assert app.worker(queues=["hot"]).run_until_idle() == 600
    calls = _shares([after - at for after, at in zip(_calls(redis_cluster), before, strict=True)])
    assert all(share >= 0.15 for share in calls), calls


def test_forty_eight_plain_queues_put_at_least_twelve_percent_of_the_keys_on_each_master(
    app: Conveyor, redis_cluster: LocalCluster
) -> None:
    for queue in range(48):
        app.enqueue_many("job", [([n], {}) for n in range(5)], queue=f"q{queue}")
    keys = _keys(redis_cluster, app)
    assert all(share >= 0.12 for share in keys), keys
