"""Partitions: one queue spread over several queue slots (docs/architecture.md, "Partitions").

Pure code: what a queue's partitions are, how they are stored, and how the limits and counts of one
queue are shared out over them and summed back. ``spread.py`` applies it to the broker's calls.

A queue of ``partitions=N`` has N labels (``keys.partition_labels``: ``<label>|<suffix>``, each on its
own window of the slots); each is a queue slot holding the same queue name, so every script works in
a partition exactly as in a queue of its own. Where the namespace is one slot (layout 4) ``N`` is
stored and reported only: the queue stays one, with its exact semantics.

Stored in the namespace slot's hash ``parts`` (``Keys.namespace_prefix + "parts"``), only for queues
configured with ``partitions`` above 1 or whose partitions changed:

    <queue>            "<N> <max_size> <concurrency>"  (the settings as given; "" for None)
    <queue> <label>    when the partition ``label`` was retired (server time): a partition a lower (or
                       another) N left, still claimed from until it is empty and :data:`GRACE` old
    <queue> #          how many times its partitions were changed (:data:`CHANGES`): a retired
                       partition dropped while this moved is listed again (``spread.py``)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from conveyor.brokers.redis.keys import partition_labels, queue_label

__all__ = ["CHANGES", "GRACE", "REFRESH", "Spread", "merge_stats", "prefix_label", "read_spreads", "share"]

#: Seconds a process keeps the ``parts`` hash it read before reading it again: how long another
#: process's change of ``partitions`` may take to reach its enqueues and claims.
REFRESH = 2.0

#: Seconds a retired partition stays listed at least, even when empty: a process whose ``parts`` is
#: at most :data:`REFRESH` old may still make an id of it and enqueue it, one socket timeout later at
#: most (the broker adds its socket timeout to this).
GRACE = 2 * REFRESH

#: The label of the ``parts`` field counting a queue's changes of partitions.
CHANGES = "#"


def prefix_label(prefix: str) -> str:
    """The label of the queue slot ``prefix`` (``{ns|label}:...``), as ``Keys.label_prefix`` makes it."""
    return prefix[prefix.index("|") + 1 : prefix.index("}")]


def share(value: int | None, count: int) -> int | None:
    """A queue's ``max_size`` or ``concurrency`` as each of ``count`` partitions enforces it: the
    ceiling of its share, so the partitions together allow at most ``count - 1`` more."""
    return None if value is None else math.ceil(value / count)


@dataclass(frozen=True)  # no slots: ``visited`` is cached (enqueues read it per task)
class Spread:
    """A queue's partitions: ``labels`` active (enqueues and claims), ``retired`` (label → when it
    was retired) still claimed from until empty; ``max_size``/``concurrency`` as configured."""

    queue: str
    count: int = 1
    labels: tuple[str, ...] = ()
    retired: dict[str, float] = field(default_factory=dict)
    max_size: int | None = None
    concurrency: int | None = None
    changes: int = 0

    @classmethod
    def whole(cls, namespace: str, queue: str) -> Spread:
        """The spread of a queue never partitioned (absent from ``parts``): its one slot, which a
        change of ``partitions`` retires like any other partition, so its tasks are still claimed."""
        return cls(queue, 1, tuple(partition_labels(namespace, queue_label(queue), 1)))

    @cached_property
    def visited(self) -> tuple[str, ...]:
        """Every label a claim, a read or the maintenance visits: the active ones, then the retired."""
        return (*self.labels, *(label for label in sorted(self.retired) if label not in self.labels))

    def entry(self) -> str:
        """The ``parts`` field value of the queue itself."""
        text = ("" if value is None else str(value) for value in (self.max_size, self.concurrency))
        return " ".join((str(self.count), *text))

    def changed(self, namespace: str, count: int, max_size: int | None, concurrency: int | None, now: float) -> Spread:
        """The spread after ``configure_queue(partitions=count)`` at ``now``: labels no longer active
        are retired (those retired before keep their time), labels active again are not."""
        labels = tuple(partition_labels(namespace, queue_label(self.queue), count))
        retired = {label: self.retired.get(label, now) for label in self.visited if label not in labels}
        return Spread(self.queue, count, labels, retired, max_size, concurrency, self.changes + 1)


def read_spreads(namespace: str, fields: dict[str, str]) -> dict[str, Spread]:
    """The ``parts`` hash as each queue's :class:`Spread` (queues absent from it have none)."""
    retired: dict[str, dict[str, float]] = {}
    entries: dict[str, list[str]] = {}
    changes: dict[str, int] = {}
    for name, value in fields.items():
        queue, _, label = name.partition(" ")
        if label == CHANGES:
            changes[queue] = int(value)
        elif label:
            retired.setdefault(queue, {})[label] = float(value)
        else:
            entries[queue] = value.split(" ")
    spreads = {}
    for queue in entries.keys() | retired.keys() | changes.keys():
        count, max_size, concurrency = entries.get(queue, ["1", "", ""])
        labels = tuple(partition_labels(namespace, queue_label(queue), int(count)))
        spreads[queue] = Spread(
            queue,
            int(count),
            labels,
            retired.get(queue, {}),
            int(max_size) if max_size else None,
            int(concurrency) if concurrency else None,
            changes.get(queue, 0),
        )
    return spreads


def merge_stats(rows: Iterable[Sequence[Any]], spreads: dict[str, Spread]) -> list[list[Any]]:
    """``stats.lua`` rows of several partitions of a queue summed into one row per queue: counts
    added, the oldest pending the earliest, ``max_size``/``concurrency`` the queue's own (each
    partition holds its share), aging and the pause flag the first partition's."""
    merged: dict[str, list[Any]] = {}
    for row in rows:
        name = row[0]
        seen = merged.get(name)
        if seen is None:
            seen = merged[name] = list(row)
            spread = spreads.get(name)
            if spread is not None:
                seen[1:3] = ["" if value is None else str(value) for value in (spread.max_size, spread.concurrency)]
            continue
        for place in range(5, 11):
            seen[place] = int(seen[place]) + int(row[place])
        if row[11] and (not seen[11] or float(row[11]) < float(seen[11])):
            seen[11] = row[11]
    return list(merged.values())
