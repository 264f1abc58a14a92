"""The private local cluster the cluster tests run on: built by hand, healthy, gone after ``stop``."""

from __future__ import annotations

import os

import pytest

from conveyor.testing.redis_cluster import SLOTS, LocalCluster

pytestmark = pytest.mark.redis


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_session_cluster_spreads_the_slots_evenly_over_three_masters(redis_cluster: LocalCluster) -> None:
    owned = []
    for master in redis_cluster.masters:
        ranges = [(int(first), int(last)) for first, last, *_ in master.call("CLUSTER SLOTS")]
        myself = master.call("CLUSTER MYID")
        shards = master.call("CLUSTER SHARDS")
        assert len(ranges) == 3
        mine = [shard for shard in shards if any(node["id"] == myself for node in shard["nodes"])]
        assert len(mine) == 1
        slots = mine[0]["slots"]
        owned.append(sum(last - first + 1 for first, last in zip(slots[::2], slots[1::2], strict=True)))
    assert sum(owned) == SLOTS
    assert max(owned) - min(owned) <= 1
    assert all(master.info("cluster")["cluster_state"] == "ok" for master in redis_cluster.masters)


@pytest.mark.slow  # a cluster of its own
def test_replicas_follow_their_masters_and_stop_leaves_no_process() -> None:
    with LocalCluster(masters=3, replicas=1) as cluster:
        pids = [node.pid for node in cluster.nodes]
        for master, group in zip(cluster.masters, cluster.replicas_of, strict=True):
            (replica,) = group
            replication = replica.info("replication")
            assert replication["master_link_status"] == "up"
            assert int(replication["master_port"]) == master.port
        assert cluster.masters[0].info("cluster")["cluster_known_nodes"] == "6"
    assert len(pids) == 6
    assert not any(pid is not None and _alive(pid) for pid in pids)
