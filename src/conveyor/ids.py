"""Generated task ids: 32 lowercase hex digits, a millisecond timestamp first, then random bits.

The id is time-ordered (like UUIDv7 or ULID) rather than 128 random bits because stores index it:
SQLite's `UNIQUE` index on `tasks.id` is a B-tree, and random ids land each insert on a random leaf,
so once the backlog outgrows the page cache every insert dirties a page of its own. Ids that start
with the time land together at the index's right edge (docs/performance-notes.md, "A growing
backlog"). Redis hashes ids, so their order costs it nothing either way.

Layout: 12 hex digits of Unix milliseconds (48 bits, good until the year 10889) and 20 hex digits
(80 bits) from ``os.urandom`` (fork-safe): too many to guess, and a collision between any two processes that
make ids in the same millisecond stays negligible. Ids of one process rise with the wall clock, in
random order within a millisecond: enough for index locality; they are not strictly monotonic, nor
ordered across processes.

The time is the wall clock (``time.time_ns``), never the app's injected clock: a frozen fake clock
would otherwise leave only the random part to tell ids apart, and ids would no longer follow the
order tasks were made in. Routing suffixes planned for Redis (``<id>~<label>``,
docs/architecture.md) go after these 32 digits and do not change them.
"""

from __future__ import annotations

from os import urandom
from time import time_ns

__all__ = ["ID_LENGTH", "id_millis", "new_task_id"]

#: Hex digits in a generated id (a custom id may be any ``check_task_id`` text).
ID_LENGTH = 32


def new_task_id() -> str:
    """A fresh task id: 12 hex digits of wall-clock milliseconds, then 80 random bits in hex."""
    # one bytes object turned to hex at once: cheaper than formatting the two parts apart
    return ((time_ns() // 1_000_000).to_bytes(6, "big") + urandom(10)).hex()


def id_millis(task_id: str) -> int:
    """The wall-clock milliseconds a generated id was made at (its first 12 hex digits)."""
    return int(task_id[:12], 16)
