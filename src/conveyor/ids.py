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

import hashlib
from os import urandom
from time import time_ns

__all__ = ["ID_LENGTH", "LABEL_MAX", "check_place", "id_millis", "new_task_id", "queue_label"]

#: Hex digits in a generated id (a custom id may be any ``check_task_id`` text).
ID_LENGTH = 32


def new_task_id() -> str:
    """A fresh task id: 12 hex digits of wall-clock milliseconds, then 80 random bits in hex."""
    # one bytes object turned to hex at once: cheaper than formatting the two parts apart
    return ((time_ns() // 1_000_000).to_bytes(6, "big") + urandom(10)).hex()


def id_millis(task_id: str) -> int:
    """The wall-clock milliseconds a generated id was made at (its first 12 hex digits)."""
    return int(task_id[:12], 16)


#: A queue name longer than this is labelled by a digest (:func:`queue_label`).
LABEL_MAX = 16


def queue_label(queue: str) -> str:
    """A queue's label: the text after ``~`` in the ids Redis makes for it (``<id>~<label>``, and
    ``<label>|<suffix>`` for a partition), which by-id calls route by, and its slot's hash tag
    (docs/architecture.md, layout 5). Its name, or above :data:`LABEL_MAX` characters the first 10 hex
    digits of its SHA-1, so that keys and ids stay short."""
    if len(queue) <= LABEL_MAX:
        return queue
    return hashlib.sha1(queue.encode()).hexdigest()[:10]


def check_place(task_id: str, queue: str) -> None:
    """A custom id may carry a place, ``~<label>`` (one Conveyor generated, enqueued again), only for
    a queue of that label: on Redis by-id calls go where it names, so stored elsewhere no call by id
    would find it. The same rule on every backend, so that an id refused by Redis is refused where
    an app is tested (``memory://``) too. ValueError otherwise."""
    label = task_id.rpartition("~")[2].partition("|")[0]
    own = queue_label(queue)
    if label != own:
        raise ValueError(
            f"task id {task_id!r} cannot go to queue {queue!r}: the text after '~' names the queue an id"
            f" belongs to (ids of {queue!r} end in '~{own}'); use another character than '~' in your own ids"
        )
