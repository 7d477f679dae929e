# Developer and CI entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: test lint migrations-check bench venv

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
	$(VPY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

migrations-check: $(VENV)/.installed
	DJANGO_SETTINGS_MODULE=tests.settings $(VPY) manage.py makemigrations --check --dry-run

bench: $(VENV)/.installed-bench
	$(VPY) -m bench $(if $(QUICK),--quick,)
