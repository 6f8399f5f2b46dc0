# The two commands a person needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench docs docs-serve clean

SERVE_STAMP := $(VENV)/.installed-server

# Everything: the tests, lint, docs, every store and front (pyspark included).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,server,client,spark,postgres,resp,docs,jobs]'
	touch $(STAMP)

# What serving needs, no more: tidelog with its server extra (HTTP, Redis and Kafka fronts, the command).
$(SERVE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[server]'
	touch $(SERVE_STAMP)

run: $(SERVE_STAMP)
	$(VENV)/bin/tidelog serve --db ./tidelog.db --host 127.0.0.1 --port 7070

lint: $(STAMP)
	$(VENV)/bin/ruff check --output-format concise src tests bench examples tools docs/gen_pages.py
	$(VENV)/bin/ruff format --check src tests bench examples tools docs/gen_pages.py
	$(VENV)/bin/mypy  # strict on the core and the stores, checked-untyped elsewhere (pyproject.toml)

# The fronts' tests again against `tidelog serve --workers 2` (tests/workers_server.py).
FRONT_TESTS := tests/test_http_api.py tests/test_http_groups.py tests/test_http_limits.py \
	tests/test_http_queues.py tests/test_http_transport.py tests/test_http_v1.py \
	tests/test_miniqueue.py tests/test_auto_create.py tests/test_subscribe_limits.py tests/test_http_exposed.py

test: lint
	$(PY) -m pytest -q
	TIDELOG_TEST_WORKERS=2 $(PY) -m pytest -q $(FRONT_TESTS)

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/core.py
	$(PY) bench/aio.py
	$(PY) bench/postgres.py
	$(PY) bench/postgres_queues.py

# mkdocs and its theme print a banner about MkDocs 2 on every build; these turn it off.
MKDOCS_QUIET := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true

# The docs site into site/; --strict turns a broken link or reference into an error.
docs: $(STAMP)
	$(MKDOCS_QUIET) $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	$(MKDOCS_QUIET) $(VENV)/bin/mkdocs serve

clean:
	rm -rf site $(VENV) .pytest_cache .ruff_cache tidelog.db tidelog.db-wal tidelog.db-shm
