"""The private test server (``conveyor.testing.redis_server``) is the process it started: a port
picked free and taken by another process's server before ours bound it must not pass for ours (two
tests would then share one server and see each other's tasks)."""

from __future__ import annotations

from conveyor.testing.redis_server import RedisServer


def test_a_port_another_server_holds_is_not_taken_for_ours() -> None:
    with RedisServer() as first:
        second = RedisServer()
        second.port = first.port  # as if free_port() had picked it just before first bound it
        with second:
            assert second.port != first.port
            assert second.info("server")["process_id"] == str(second.pid)
            assert first.info("server")["process_id"] == str(first.pid)
