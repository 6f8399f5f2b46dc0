# The two commands a person needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,postgres,resp]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m tidelog.demo --db ./tidelog.db

lint: $(STAMP)
	$(VENV)/bin/ruff check --output-format concise src tests bench
	$(VENV)/bin/ruff format --check src tests bench

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/core.py
	$(PY) bench/postgres.py
	$(PY) bench/postgres_queues.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache tidelog.db tidelog.db-wal tidelog.db-shm
