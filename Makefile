# Two commands for a newcomer: `make demo` and `make test`. Everything else is installed by these.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint types unit bench bench-smoke clean

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
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q
	@# The Redis-backed tests run again on Debian's redis-server when the machine has one (valkey above).
	@if command -v redis-server >/dev/null 2>&1; then \
		echo "== Redis-backed tests again on $$(redis-server --version | cut -d' ' -f1-3)"; \
		CONVEYOR_TEST_REDIS=redis-server $(BIN)/pytest -q -k redis tests/conformance tests/brokers/test_redis.py tests/brokers/test_redis_chunks.py tests/brokers/test_redis_security.py; \
	fi

test: lint types unit

bench: $(STAMP)
	$(BIN)/python -m bench

bench-smoke: $(STAMP)
	N=500 $(BIN)/python -m bench --smoke

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
