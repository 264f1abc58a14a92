"""``conveyor doctor`` on a Redis Cluster: one row per master (address, slots, replicas and their link),
a warning for a master without a live replica, and the server checks run on every master, each row
naming its master. Through click's runner, on real local clusters."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.cli import cli as cli_group
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import ClusterNode, LocalCluster

pytestmark = pytest.mark.redis


def doctor(url: str) -> dict[str, tuple[str, str]]:
    result = CliRunner().invoke(cli_group, ["--url", url, "doctor", "--json"])
    assert result.exit_code == 0, result.output  # warnings only: never a FAIL
    return {check["name"]: (check["status"], check["detail"]) for check in json.loads(result.stdout)}


def address(node: ClusterNode) -> str:
    return f"127.0.0.1:{node.port}"


@pytest.fixture(scope="module")
def replicated() -> Iterator[LocalCluster]:
    """3 masters with a replica each; the last test kills one replica."""
    with LocalCluster(masters=3, replicas=1, node_timeout=1.0) as cluster:
        yield cluster


@pytest.mark.slow  # builds a cluster of its own (six servers)
def test_doctor_lists_each_master_with_its_slots_and_replicas(replicated: LocalCluster) -> None:
    found = doctor(replicated.url)
    assert found["cluster"] == ("OK", "3 master(s) serving 16384 of 16384 slots, 3 replica(s)")
    for master, (replica,) in zip(replicated.masters, replicated.replicas_of, strict=True):
        assert found[f"master {address(master)}"][0] == "OK"
        assert f"replica {address(replica)} up" in found[f"master {address(master)}"][1]
    first = address(replicated.masters[0])
    assert found[f"master {first}"][1].startswith("slots 0-5460 (5461);")


@pytest.mark.slow
def test_doctor_runs_the_server_checks_on_every_master_and_names_it(replicated: LocalCluster) -> None:
    evicting = replicated.masters[1]
    evicting.call("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        found = doctor(replicated.url + "?wait_replicas=1")
    finally:
        evicting.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
    for master in replicated.masters:
        status, detail = found[f"maxmemory-policy ({address(master)})"]
        assert (status, detail.partition(" ")[0]) == (
            ("WARN", "'allkeys-lru'") if master is evicting else ("OK", "noeviction")
        )
        assert found[f"persistence ({address(master)})"][0] == "WARN"  # the test servers keep nothing on disk
        assert found[f"replicas ({address(master)})"] == ("OK", "1 connected, wait_replicas=1")
    assert "maxmemory-policy" not in found  # no unattributed finding


@pytest.mark.slow
def test_doctor_warns_when_a_replica_is_killed(replicated: LocalCluster) -> None:
    victim = replicated.replicas_of[2][0]
    victim.kill()  # SIGKILL by its PID
    master = f"master {address(replicated.masters[2])}"

    def warned() -> bool:
        return doctor(replicated.url)[master][0] == "WARN"

    poll_until(warned)
    found = doctor(replicated.url)
    assert f"replica link down: {address(victim)}" in found[master][1]
    assert [name for name, (status, _) in found.items() if name.startswith("master ") and status == "WARN"] == [master]


def test_doctor_warns_about_every_master_without_a_replica(redis_cluster: LocalCluster) -> None:
    found = doctor(redis_cluster.url)
    assert found["cluster"] == ("OK", "3 master(s) serving 16384 of 16384 slots, 0 replica(s)")
    for master in redis_cluster.masters:
        status, detail = found[f"master {address(master)}"]
        assert status == "WARN" and "no replica: a failover of this master loses every task it holds" in detail


def test_doctor_on_one_server_lists_no_masters(redis_url: str) -> None:
    found = doctor(redis_url)
    assert "cluster" not in found and not any(name.startswith("master ") for name in found)
    assert found["maxmemory-policy"][0] in ("OK", "WARN")


def test_doctor_as_a_user_with_the_documented_permissions_still_lists_the_masters(redis_cluster: LocalCluster) -> None:
    """``NEEDED_ACL`` grants ``CLUSTER SHARDS`` but neither ``INFO`` nor ``CONFIG GET``: the topology is
    shown, and each master's settings are reported unreadable, by master, instead of failing."""
    namespace = "t" + uuid.uuid4().hex
    user = "u" + uuid.uuid4().hex[:8]
    for node in redis_cluster.nodes:
        node.call("ACL", "SETUSER", user, "reset", "on", ">pw", *NEEDED_ACL.replace("NS", namespace).split())
    try:
        found = doctor(f"redis+cluster://{user}:pw@{redis_cluster.seeds}/?namespace={namespace}")
    finally:
        for node in redis_cluster.nodes:
            node.call("ACL", "DELUSER", user)
    assert found["cluster"][0] == "OK"
    for master in redis_cluster.masters:
        assert found[f"master {address(master)}"][0] == "WARN"  # no replica on the session cluster
        status, detail = found[f"server configuration ({address(master)})"]
        assert status == "WARN" and detail.startswith("unreadable")
