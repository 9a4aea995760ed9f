# Every target installs what it needs: a fresh clone runs `make test` or `make demo` directly.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint fmt bench schemas docs demo demo-shared demo-tools clean chromium bubblewrap

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,otel]'
	touch $(STAMP)

# The console's browser tests drive Debian's chromium (Playwright, never its own browser build).
chromium:
	command -v chromium || (apt-get update && apt-get install -y chromium)

# Shell.Exec runs commands under Debian's bubblewrap where it can (docs/tools.md).
bubblewrap:
	command -v bwrap || (apt-get update && apt-get install -y bubblewrap)

test: $(STAMP) chromium bubblewrap
	$(PY) -m pytest -n 2 --dist loadfile --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: $(STAMP)
	$(VENV)/bin/parley demo

# Seed 000: two deployments and a gateway on this machine, a shared agent over the relay.
demo-shared: $(STAMP)
	$(VENV)/bin/parley demo --shared

# A coding agent fixes a repository with tools, its commands contained (docs/tools.md).
demo-tools: $(STAMP) bubblewrap
	$(VENV)/bin/parley demo --tools

bench: $(STAMP)
	$(VENV)/bin/parley bench

schemas: $(STAMP)
	$(VENV)/bin/parley schemas

# docs/commands.md's "Every flag" section, written from the parser.
docs: $(STAMP)
	$(VENV)/bin/python -m tools.flag_reference

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
