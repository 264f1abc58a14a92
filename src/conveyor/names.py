"""Task names: the known name a user most likely meant when theirs is unknown.

A task is registered under its function's name unless given one (``@app.task(name=...)``), while
Celery names a task ``module.function``: ``conveyor enqueue tasks.send`` for a handler registered as
``send`` runs nowhere. The worker, ``conveyor enqueue`` and ``conveyor doctor`` name the likely one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["did_you_mean", "similar_name"]

#: How close a misspelt name must be to a known one (``difflib``'s ratio) to be suggested.
CUTOFF = 0.7

_LAST_PART = re.compile(r"[^.:]+$")


def similar_name(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` that ``name`` most likely meant, or None: first a name whose last dotted
    (or ``module:``) part is ``name``'s last part (``tasks.send`` and ``send``), else the closest
    spelling above :data:`CUTOFF`. ``name`` itself is never suggested."""
    candidates = sorted(set(known) - {name})
    if not candidates:
        return None
    last = _last_part(name)
    same_last = [candidate for candidate in candidates if _last_part(candidate) == last]
    if same_last:
        return min(same_last, key=len)  # the shortest: the least qualified of equal endings
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=CUTOFF)
    return close[0] if close else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'send'?)`` to append to a message about the unknown ``name``, or ``""``."""
    found = similar_name(name, known)
    return "" if found is None else f" (did you mean {found!r}?)"


def _last_part(name: str) -> str:
    match = _LAST_PART.search(name)
    return match.group(0) if match else name
