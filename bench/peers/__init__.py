"""One small module per peer library, run as scripts in the peers virtualenv (``bench/.venv-peers``).

Each ``<peer>_peer`` module builds its app from the environment as ``bench.workload`` reads it
(``BENCH_URL``, ``BENCH_VARIANT``, ``BENCH_WORKLOAD``), defines the tasks ``noop(ts=None, fail=False)``
and ``sleepy()``, and exposes ``SETTINGS``, ``BULK``, ``MIXED`` (None when the mixed workload is
supported, else why not), ``Producer`` (or ``AsyncProducer``: ``one(...)``, and ``bulk(task, n)`` when
``BULK``) and ``run_worker()``. ``_driver.py`` is the command line.
These modules import the peer libraries, which the dev virtualenv does not have: mypy ignores them.
"""
