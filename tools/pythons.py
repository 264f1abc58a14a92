"""The newest Python here other than the one running this: `make test` runs the whole suite on it too.

Prints ``VERSION PATH`` (``3.13 /root/.pyenv/versions/3.13.0/bin/python3.13``) of the highest
``python3.N`` >= 3.11 found among pyenv's versions and the system's, whose minor version is not the
running interpreter's; prints nothing when there is none. ``--between`` instead prints ``VERSION PATH``
pairs, one minor version each (its newest patch release), of those above the running interpreter's
and below that newest one: `make test` runs the quick tests on each, so every Python between the
oldest and the newest is tried too. ``--check-oldest`` instead prints a note when the running
interpreter is not the oldest supported Python (the main venv should be).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

OLDEST = (3, 11)  # pyproject.toml's requires-python
PLACES = ["~/.pyenv/versions/*/bin/python3.*", "/usr/local/bin/python3.*", "/usr/bin/python3.*"]


def candidates() -> list[str]:
    found: list[str] = []
    for place in PLACES:
        for path in sorted(glob.glob(os.path.expanduser(place))):
            named = re.fullmatch(r"python3\.(\d+)", os.path.basename(path))
            if named and int(named.group(1)) >= OLDEST[1] and os.access(path, os.X_OK):
                found.append(path)
    return found


def version(path: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [path, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        major, minor, micro = (int(part) for part in out)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return major, minor, micro


def others() -> list[tuple[tuple[int, int, int], str]]:
    """Per supported minor version other than the running one, its newest interpreter here, oldest
    first (each candidate asked its version once)."""
    best: dict[tuple[int, int], tuple[tuple[int, int, int], str]] = {}
    for path in candidates():
        found = version(path)
        if found is None or found[:2] < OLDEST or found[:2] == sys.version_info[:2]:
            continue
        if found[:2] not in best or found > best[found[:2]][0]:
            best[found[:2]] = (found, path)
    return [best[minor] for minor in sorted(best)]


def newest() -> tuple[tuple[int, int, int], str] | None:
    found = others()
    return found[-1] if found else None


def between() -> list[tuple[tuple[int, int, int], str]]:
    """Per minor version above the running one and below the newest, its newest interpreter here."""
    found = others()
    return [(version, path) for version, path in found[:-1] if version[:2] > sys.version_info[:2]]


def main() -> None:
    if sys.argv[1:] == ["--between"]:
        print(" ".join(f"{major}.{minor} {path}" for (major, minor, _micro), path in between()))
        return
    if sys.argv[1:] == ["--check-oldest"]:
        if sys.version_info[:2] != OLDEST:
            here = ".".join(map(str, sys.version_info[:2]))
            print(f"note: the main venv runs Python {here}, not the oldest supported ({OLDEST[0]}.{OLDEST[1]})")
        return
    best = newest()
    if best is not None:
        (major, minor, _micro), path = best
        print(f"{major}.{minor} {path}")


if __name__ == "__main__":
    main()
