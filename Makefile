# Developer and CI entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PYTEST_ARGS ?=
# pytest-xdist workers (one per core), each with its own servers and sqlite file, each
# given whole test files (order within a file kept). XDIST=0: one process.
XDIST ?= auto

.PHONY: test test-quick lint migrations-check bench venv faults soak

venv: $(VENV)/.installed

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --upgrade pip

# Re-install only when pyproject.toml changed since the last install.
$(VENV)/.installed: pyproject.toml | $(VPY)
	$(VPY) -m pip install -e '.[dev]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed
	$(VPY) -m pip install -e '.[dev,bench]'
	touch $@

test: $(VENV)/.installed
	$(VPY) -m pytest -n $(XDIST) --dist loadfile $(PYTEST_ARGS)

# The inner loop (well under a minute): one server (the default) plus fakeredis, no tests
# marked slow, and the fault, Sentinel, Cluster, packaging and demo-site tests left to
# `make test`. Stops at the first failure.
QUICK_SKIP := test_faults test_sentinel test_cluster test_packaging test_demo
test-quick: $(VENV)/.installed
	REDISLOCK_TEST_SERVERS=default $(VPY) -m pytest -n $(XDIST) --dist loadfile -q -x -m "not slow" \
		$(foreach t,$(QUICK_SKIP),--ignore=tests/$(t).py) $(PYTEST_ARGS)

# ruff, then the import contracts of pyproject.toml's [tool.importlinter]: the layers from
# the kinds up to the admin, and no import cycles (docs/architecture.md).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

migrations-check: $(VENV)/.installed
	DJANGO_SETTINGS_MODULE=tests.support.settings $(VPY) manage.py makemigrations --check --dry-run

bench: $(VENV)/.installed-bench
	$(VPY) -m bench $(if $(QUICK),--quick,)

.PHONY: demo docs docs-site dist typecheck

# The demo site: embedded Redis (unless REDIS_URL is set), migrations, an admin user,
# background lock holders, http://127.0.0.1:8000/ (PORT=... to change). Ctrl-C stops it all.
demo: $(VENV)/.installed
	$(VPY) demo_site/run.py

# Run every code example of README.md and docs/ (they are tests too).
docs: $(VENV)/.installed
	$(VPY) -m pytest tests/test_docs.py -q $(PYTEST_ARGS)

# The docs as a website in site/ (MkDocs, strict: a broken link or anchor, or a page left
# out of mkdocs.yml's navigation, fails the build).
docs-site: $(VENV)/.installed
	$(VPY) -m mkdocs build --strict --site-dir site

# Build the sdist and the wheel into dist/, list what each ships, check both lists
# (tests/support/dist_check.py) and their metadata (twine check).
dist: $(VENV)/.installed
	rm -rf dist
	$(VPY) -m build --outdir dist .
	$(VPY) -m tests.support.dist_check dist
	$(VPY) -m twine check --strict dist/*

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy django_redislock

# The fault-injection suite, every scenario RUNS times with and without its protection.
faults: $(VENV)/.installed
	$(VPY) -m tests.faults --runs $(or $(RUNS),20)

# The mixed-fault soak: worker processes on every kind (Lock, Redlock, Semaphore,
# ReadWriteLock, MultiLock, Election), one random fault at a time, a checker per invariant
# at the end (tests/soak). SOAK_SECONDS (default 600) long; it stops by itself. BROKEN=1
# runs each kind's broken variant (violations expected).
SOAK_SECONDS ?= 600
soak: $(VENV)/.installed
	$(VPY) -m tests.soak --seconds $(SOAK_SECONDS) $(if $(BROKEN),--broken,)
