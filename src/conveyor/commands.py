"""Operator commands to a running worker, sent from the dashboard or ``Inspector`` through the broker.

``quiet``: stop claiming new tasks; what runs finishes and settles as usual (before a deploy, or to
drain a host). ``stop``: shut down gracefully, as on SIGTERM. The broker keeps the command
(``CommandsWorkers``) until the worker unregisters or :data:`COMMAND_TTL` passes; the worker reads it
at each registry beat (``WorkerConfig.registry_interval``) and obeys once. Commands only escalate:
a ``quiet`` sent after ``stop`` does not undo it, and nothing un-quiets a worker but a restart.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "COMMAND_TTL", "QUIET", "STOP", "check_command", "stronger"]

QUIET = "quiet"
STOP = "stop"
#: Known commands, weakest first.
COMMANDS = (QUIET, STOP)
#: Seconds a command is kept for a worker that does not unregister (one day).
COMMAND_TTL = 86400.0


def check_command(command: object) -> str:
    if not isinstance(command, str):
        raise TypeError(f"command must be a str, not {type(command).__name__}")
    if command not in COMMANDS:
        raise ValueError(f"unknown worker command {command!r}; one of: {', '.join(COMMANDS)}")
    return command


def stronger(current: str | None, new: str) -> str:
    """The command to keep when ``new`` arrives while ``current`` is stored."""
    if current in COMMANDS and COMMANDS.index(current) > COMMANDS.index(new):
        return current
    return new
