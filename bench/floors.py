"""The physical floors: raw round trips/s and pipelined ops/s of the server from one Python process."""

from __future__ import annotations

import time

from bench.measure import Figure
from bench.server import Server

__all__ = ["measure_floors"]

_SCRIPT = "return 1"


def measure_floors(server: Server, n: int, reps: int) -> list[Figure]:
    client = server.client()
    ping = Figure("server floor", "redis-py+hiredis", "round_trip", "PING round trips/s", "ops/s")
    piped = Figure("server floor", "redis-py+hiredis", "pipelined", "pipelined PING/s", "ops/s")
    script = Figure("server floor", "redis-py+hiredis", "pipelined_script", "pipelined EVALSHA/s", "ops/s")
    sha = client.script_load(_SCRIPT)
    batch = 1000
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(n):
            client.ping()
        ping.runs.append(n / (time.perf_counter() - start))
        for figure, command in ((piped, "ping"), (script, "evalsha")):
            total = max(n * 5, batch)
            start = time.perf_counter()
            for _ in range(total // batch):
                pipe = client.pipeline(transaction=False)
                for _ in range(batch):
                    if command == "ping":
                        pipe.ping()
                    else:
                        pipe.evalsha(sha, 0)
                pipe.execute()
            figure.runs.append(total // batch * batch / (time.perf_counter() - start))
    return [ping, piped, script]
