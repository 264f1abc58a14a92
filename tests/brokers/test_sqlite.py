"""SQLite-specific behaviour: the file format, opening errors, locking, threads and cross-process events.

The semantics shared with every backend are checked by ``tests/conformance`` and by the differential
test against the reference broker; this file covers what only a file-backed broker has.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.brokers import open_broker
from conveyor.brokers.base import ChecksServer, Finding, WaitsForWork
from conveyor.brokers.sqlite import SQLiteBroker, SQLiteConfig
from conveyor.brokers.sqlite.schema import SCHEMA_VERSION
from conveyor.errors import BrokerError, BrokerUnavailable, ConfigurationError, SchemaError
from conveyor.model import BrokerPolicy, Event, NewTask, Outcome, TaskState
from conveyor.testing import poll_until

NOW = 1_000_000.0


def _task(task_id: str, queue: str = "default") -> NewTask:
    return NewTask(task_id, "job", queue, "[]")


# -- URL and file format -------------------------------------------------------------------------


def test_url_forms_and_options_are_parsed() -> None:
    assert SQLiteConfig.from_url("sqlite:///rel/dir/x.db").path == "rel/dir/x.db"
    config = SQLiteConfig.from_url("sqlite:////abs/x.db?synchronous=full&busy_timeout=250&poll_interval=0.5")
    assert (config.path, config.synchronous) == ("/abs/x.db", "FULL")
    assert (config.busy_timeout, config.poll_interval) == (0.25, 0.5)
    assert SQLiteConfig.from_url("sqlite:///x.db").synchronous == "FULL"  # every commit survives a power cut


@pytest.mark.parametrize(
    "url",
    ["sqlite://host/x.db", "sqlite:///", "sqlite:///:memory:", "sqlite:///x.db?synchronous=sometimes",
     "sqlite:///x.db?busy_timeout=-1", "sqlite:///x.db?colour=blue"],
)  # fmt: skip
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteConfig.from_url(url)


def test_open_broker_picks_the_sqlite_backend(db_path: Path) -> None:
    broker = open_broker(f"sqlite:///{db_path}")
    try:
        assert isinstance(broker, SQLiteBroker)
    finally:
        broker.close()


def test_file_is_in_wal_mode(open_sqlite: Callable[..., SQLiteBroker], db_path: Path) -> None:
    open_sqlite()
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_preflight_finds_the_wal_journal_and_the_current_schema(open_sqlite: Callable[..., SQLiteBroker]) -> None:
    broker = open_sqlite()
    assert isinstance(broker, ChecksServer)
    wanted = [Finding("journal_mode", True, "wal"), Finding("schema_version", True, str(SCHEMA_VERSION))]
    assert broker.preflight() == wanted


@pytest.mark.parametrize(
    ("option", "level"), [(None, 2), ("normal", 1), ("FULL", 2), ("Extra", 3), ("off", 0)]
)  # fmt: skip
def test_every_connection_runs_with_the_configured_synchronous(
    open_sqlite: Callable[..., SQLiteBroker], option: str | None, level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = open_sqlite(**({} if option is None else {"synchronous": option}))
    levels: list[int] = []
    connect = broker._db._connect

    def connect_and_read() -> sqlite3.Connection:
        conn = connect()
        levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])  # in the opening thread
        return conn

    monkeypatch.setattr(broker._db, "_connect", connect_and_read)
    broker.enqueue([_task("t")], NOW)
    readers = [threading.Thread(target=broker.get, args=("t", NOW)) for _ in range(3)]  # one connection each
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    broker.subscribe(lambda event: None)  # the event poller's thread opens one more
    poll_until(lambda: len(levels) >= 4)
    broker._events.close()
    assert levels == [level] * len(levels)


@pytest.mark.parametrize("value", ["sometimes", "", "2", "FULLY"])
def test_a_bad_synchronous_value_is_refused_when_the_broker_is_created(db_path: Path, value: str) -> None:
    with pytest.raises(ConfigurationError, match="synchronous must be one of OFF, NORMAL, FULL, EXTRA"):
        Conveyor(f"sqlite:///{db_path}?synchronous={value}")
    assert not db_path.exists()  # refused before the file was created


def test_schema_version_is_stored(open_sqlite: Callable[..., SQLiteBroker], db_path: Path) -> None:
    open_sqlite()
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_data_survives_reopening(open_sqlite: Callable[..., SQLiteBroker]) -> None:
    first = open_sqlite()
    first.enqueue([_task("kept")], NOW)
    first.close()
    record = open_sqlite().get("kept", NOW)
    assert record is not None and record.state is TaskState.PENDING


# -- files we must refuse, untouched ---------------------------------------------------------------


def test_newer_schema_version_is_refused_and_left_untouched(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(SchemaError, match="newer"):
        SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    assert db_path.read_bytes() == before
    assert not Path(f"{db_path}-wal").exists()


@pytest.mark.parametrize("content", [b"this is not a database\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_non_sqlite_or_corrupt_file_is_a_configuration_error(db_path: Path, content: bytes) -> None:
    db_path.write_bytes(content)
    with pytest.raises(ConfigurationError):
        SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    assert db_path.read_bytes() == content


def test_another_applications_database_is_refused(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    with pytest.raises(ConfigurationError, match="another application"):
        SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    with sqlite3.connect(db_path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["invoices"]
    conn.close()


def test_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        SQLiteBroker.from_url(f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}", BrokerPolicy())
    assert not (tmp_path / "nowhere").exists()


# The child drops the capabilities that let root ignore file modes (CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH, CAP_FOWNER), so a read-only file is read-only for it even when tests run as root.
_OPEN_WITHOUT_OVERRIDE = """
import ctypes, sys
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
libc = ctypes.CDLL(None, use_errno=True)
header, data = Header(0x20080522, 0), (Data * 2)()
assert libc.capget(ctypes.byref(header), data) == 0
keep = ~((1 << 1) | (1 << 2) | (1 << 3)) & 0xFFFFFFFF
for field in ("effective", "permitted", "inheritable"):
    setattr(data[0], field, getattr(data[0], field) & keep)
assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.errors import ConfigurationError
from conveyor.model import BrokerPolicy
try:
    SQLiteBroker.from_url(sys.argv[1], BrokerPolicy()).close()
except ConfigurationError as exc:
    print(f"ConfigurationError: {exc}")
    sys.exit(3)
"""


@pytest.mark.slow  # a process of its own
@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_file_or_directory_is_a_configuration_error(
    open_sqlite: Callable[..., SQLiteBroker], db_path: Path, what: str
) -> None:
    broker = open_sqlite()
    broker.enqueue([_task("kept")], NOW)
    broker.close()
    for path in db_path.parent.iterdir():
        path.chmod(0o444)
    if what == "directory":
        db_path.parent.chmod(0o555)
    before = db_path.read_bytes()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _OPEN_WITHOUT_OVERRIDE, f"sqlite:///{db_path}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        db_path.parent.chmod(0o755)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "read" in proc.stdout
    assert db_path.read_bytes() == before


# -- locking ---------------------------------------------------------------------------------------


@pytest.fixture
def write_lock_holder(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection that holds the write lock until it commits."""
    conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def test_database_locked_for_long_raises_broker_unavailable_in_bounded_time(
    open_sqlite: Callable[..., SQLiteBroker], write_lock_holder: sqlite3.Connection
) -> None:
    broker = open_sqlite(busy_timeout=300)
    write_lock_holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="locked"):
        broker.enqueue([_task("blocked")], NOW)
    assert 0.25 <= time.monotonic() - started < 3.0
    write_lock_holder.execute("COMMIT")
    assert broker.get("blocked", NOW) is None
    assert broker.enqueue([_task("blocked")], NOW) == [None]


def test_a_briefly_busy_database_is_waited_out(
    open_sqlite: Callable[..., SQLiteBroker], write_lock_holder: sqlite3.Connection
) -> None:
    broker = open_sqlite(busy_timeout=10000)
    write_lock_holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, write_lock_holder.execute, ("COMMIT",))
    release.start()
    try:
        assert broker.enqueue([_task("waited")], NOW) == [None]
    finally:
        release.join()
    assert broker.get("waited", NOW) is not None


def test_reads_are_not_blocked_by_a_writer(
    open_sqlite: Callable[..., SQLiteBroker], write_lock_holder: sqlite3.Connection
) -> None:
    broker = open_sqlite(busy_timeout=100)
    broker.enqueue([_task("visible")], NOW)
    write_lock_holder.execute("BEGIN IMMEDIATE")
    assert broker.get("visible", NOW) is not None
    assert broker.queues(NOW)[0].counts["pending"] == 1


# -- threads and processes -------------------------------------------------------------------------


def test_threads_sharing_a_broker_claim_each_task_once(open_sqlite: Callable[..., SQLiteBroker]) -> None:
    broker = open_sqlite()
    broker.enqueue([_task(f"t{i}") for i in range(600)], NOW)
    claimed: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while batch := broker.claim(["default"], NOW, 60.0, limit=7):
                claimed.extend(r.id for r in batch)
                assert all(broker.settle([Outcome(r.id, r.lease_token or "", "complete") for r in batch], NOW))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(claimed) == sorted(f"t{i}" for i in range(600))
    assert broker.queues(NOW)[0].counts["completed"] == 600


def _open_connections(db_path: Path) -> int:
    """This process's open SQLite connections to ``db_path``: its descriptors on the WAL file, one each.

    (Not those on the database file: SQLite may keep a closed connection's one open there, for reuse.)
    """
    wal = f"{db_path}-wal"
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == wal
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            pass
    return count


def test_a_threads_connection_is_closed_when_the_thread_ends(
    open_sqlite: Callable[..., SQLiteBroker], db_path: Path
) -> None:
    broker = open_sqlite()
    broker.enqueue([_task("t")], NOW)
    assert _open_connections(db_path) == 1  # this thread's connection
    for _ in range(10):
        thread = threading.Thread(target=broker.get, args=("t", NOW))
        thread.start()
        thread.join()
    poll_until(lambda: _open_connections(db_path) == 1)
    assert broker.get("t", NOW) is not None


def test_close_closes_the_connections_of_threads_still_running(
    open_sqlite: Callable[..., SQLiteBroker], db_path: Path
) -> None:
    broker = open_sqlite()
    broker.enqueue([_task("t")], NOW)
    used = threading.Barrier(5)
    release = threading.Event()

    def use_then_wait() -> None:
        broker.get("t", NOW)
        used.wait()
        release.wait()

    threads = [threading.Thread(target=use_then_wait) for _ in range(4)]
    for thread in threads:
        thread.start()
    used.wait()
    assert _open_connections(db_path) == 5
    broker.close()
    assert _open_connections(db_path) == 0
    release.set()
    for thread in threads:
        thread.join()
    assert broker.get("t", NOW) is not None  # reopened lazily
    assert _open_connections(db_path) == 1


def test_close_while_a_thread_opens_its_connection_closes_that_one_too(
    open_sqlite: Callable[..., SQLiteBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = open_sqlite()
    broker.enqueue([_task("t")], NOW)
    connect = broker._db._connect
    opened: list[sqlite3.Connection] = []
    connected, closed, release = threading.Event(), threading.Event(), threading.Event()
    outcome: list[object] = []

    def connect_then_let_close_run() -> sqlite3.Connection:
        conn = connect()
        opened.append(conn)
        connected.set()
        closed.wait()  # broker.close() runs here, between opening and registering
        return conn

    def get_then_stay_alive() -> None:
        try:
            outcome.append(broker.get("t", NOW))
        except BrokerError as exc:
            outcome.append(exc)
        release.wait()  # a live thread keeps its thread-local connection

    monkeypatch.setattr(broker._db, "_connect", connect_then_let_close_run)
    thread = threading.Thread(target=get_then_stay_alive)
    thread.start()
    try:
        assert connected.wait(5)
        broker.close()
        closed.set()
        poll_until(lambda: bool(outcome))
        assert isinstance(outcome[0], BrokerError)
        with pytest.raises(sqlite3.ProgrammingError):  # closed, although its thread still runs
            opened[0].execute("SELECT 1")
    finally:
        closed.set()
        release.set()
        thread.join()
    monkeypatch.undo()
    assert broker.get("t", NOW) is not None  # a call after close() reopens


def test_events_reach_another_broker_on_the_same_file_exactly_once(
    open_sqlite: Callable[..., SQLiteBroker],
) -> None:
    watcher, producer = open_sqlite(poll_interval=0.01), open_sqlite(poll_interval=0.01)
    seen_by_watcher: list[Event] = []
    seen_by_producer: list[Event] = []
    watcher.subscribe(seen_by_watcher.append)
    producer.subscribe(seen_by_producer.append)
    producer.enqueue([_task("e1")], NOW)
    (lease,) = producer.claim(["default"], NOW, 30.0)
    assert seen_by_producer == [  # its own events: synchronously, in the calling thread
        Event("e1", None, "pending", "default", NOW),
        Event("e1", "pending", "active", "default", NOW),
    ]
    poll_until(lambda: len(seen_by_watcher) == 2)
    assert seen_by_watcher == seen_by_producer
    watcher.settle([Outcome("e1", lease.lease_token or "", "complete")], NOW)
    poll_until(lambda: len(seen_by_producer) == 3)  # the poller went past the producer's own events
    assert seen_by_producer[2] == Event("e1", "active", "completed", "default", NOW)
    assert len(seen_by_watcher) == 3


def test_unsubscribed_files_record_no_events_and_the_table_is_trimmed(
    open_sqlite: Callable[..., SQLiteBroker], db_path: Path
) -> None:
    producer = open_sqlite()
    producer.enqueue([_task(f"quiet{i}") for i in range(20)], NOW)
    watcher = open_sqlite(events_kept=5)
    watcher.subscribe(lambda event: None)
    producer.enqueue([_task(f"loud{i}") for i in range(20)], NOW)
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 20
    watcher.clean(NOW)
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 5


def test_the_last_unsubscribe_stops_polling_and_listening(
    open_sqlite: Callable[..., SQLiteBroker], db_path: Path
) -> None:
    """The poller ran on until close(), writers kept events for a listener gone, and at interpreter
    exit it met the closed database (a WARNING and a traceback on stderr)."""
    watcher, producer = open_sqlite(poll_interval=0.01), open_sqlite()

    def pollers() -> int:
        return sum(thread.name == "conveyor-sqlite-events" and thread.is_alive() for thread in threading.enumerate())

    def listeners() -> int:
        with closing(sqlite3.connect(db_path)) as conn:
            return int(conn.execute("SELECT count(*) FROM listeners").fetchone()[0])

    before = pollers()
    seen: list[Event] = []
    stop = watcher.subscribe(seen.append)
    assert (pollers(), listeners()) == (before + 1, 1)
    stop()
    assert (pollers(), listeners()) == (before, 0)

    def once(event: Event) -> None:  # unsubscribes itself on the poller's thread: no join of itself
        seen.append(event)
        again()

    again = watcher.subscribe(once)
    producer.enqueue([_task("told")], NOW)
    poll_until(lambda: seen == [Event("told", None, "pending", "default", NOW)], message="the event")
    poll_until(lambda: (pollers(), listeners()) == (before, 0), message="the poller to end")


@pytest.mark.slow  # processes of their own
def test_several_processes_can_create_the_same_file_at_once(db_path: Path) -> None:
    script = (
        "import sys\n"
        "from conveyor.brokers.sqlite import SQLiteBroker\n"
        "from conveyor.model import BrokerPolicy, NewTask\n"
        "b = SQLiteBroker.from_url('sqlite:///' + sys.argv[1], BrokerPolicy())\n"
        "b.enqueue([NewTask(sys.argv[2], 'job', 'default', '[]')], 0.0); b.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db_path), f"p{i}"]) for i in range(4)]
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0, 0, 0]
    broker = SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    try:
        assert broker.queues(0.0)[0].counts["pending"] == 4
    finally:
        broker.close()


# -- waking idle consumers -------------------------------------------------------------------------


def test_wait_for_work_times_out_when_nobody_writes(open_sqlite: Callable[..., SQLiteBroker]) -> None:
    broker = open_sqlite()
    assert isinstance(broker, WaitsForWork)
    broker.claim(["default"], NOW, 30.0)
    started = time.monotonic()
    assert broker.wait_for_work(["default"], 0.05) is False
    assert time.monotonic() - started >= 0.05


def test_wait_for_work_wakes_when_another_connection_enqueues(open_sqlite: Callable[..., SQLiteBroker]) -> None:
    consumer, producer = open_sqlite(), open_sqlite()
    assert consumer.claim(["default"], NOW, 30.0) == []
    enqueued_at: list[float] = []

    def produce() -> None:
        time.sleep(0.05)  # let the consumer start waiting: the wake-up is what is measured
        enqueued_at.append(time.monotonic())
        producer.enqueue([_task("wake")], NOW)

    thread = threading.Thread(target=produce)
    thread.start()
    assert consumer.wait_for_work(["default"], 10.0) is True
    woke_at = time.monotonic()
    thread.join()
    assert woke_at - enqueued_at[0] < 1.0  # checked every 2 ms; far below the 10 s timeout
    assert [r.id for r in consumer.claim(["default"], NOW, 30.0)] == ["wake"]


def test_a_commit_between_an_empty_claim_and_the_wait_is_not_missed(
    open_sqlite: Callable[..., SQLiteBroker],
) -> None:
    consumer, producer = open_sqlite(), open_sqlite()
    assert consumer.claim(["default"], NOW, 30.0) == []
    producer.enqueue([_task("early")], NOW)  # lands before the consumer starts waiting
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 10.0) is True
    assert time.monotonic() - started < 1.0
