"""How a cluster master's line reads in the preflight (``preflight.Shard.finding``); the topology itself
is read from real clusters in ``tests/cli/test_doctor_cluster.py``."""

from __future__ import annotations

from conveyor.brokers.base import Finding
from conveyor.brokers.redis.preflight import Replica, Shard

UP = Replica("10.0.0.2:7000", True, "up")


def test_a_master_lists_its_slot_ranges_single_slots_and_count() -> None:
    shard = Shard("10.0.0.1:7000", ((0, 99), (150, 150), (200, 299)), (UP,))
    assert shard.finding() == Finding(
        "master 10.0.0.1:7000", True, "slots 0-99, 150, 200-299 (201); replica 10.0.0.2:7000 up"
    )


def test_a_master_without_a_replica_is_a_warning() -> None:
    finding = Shard("10.0.0.1:7000", ((0, 16383),), ()).finding()
    assert not finding.ok and "no replica" in finding.detail


def test_one_replica_down_among_several_is_a_warning_naming_it() -> None:
    down = Replica("10.0.0.3:7000", False, "fail")
    finding = Shard("10.0.0.1:7000", (), (UP, down)).finding()
    assert not finding.ok
    assert finding.detail.startswith("no slots; replica link down: 10.0.0.2:7000 up, 10.0.0.3:7000 fail")
