# Thin entry points; everything real lives in tools/ (python -m tools.<step>).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

WHEELS_DIR ?= wheelhouse
INDEX_DIR  ?= site
BASE_URL   ?= http://127.0.0.1:8765/files
YANKED     ?= index/yanked.yaml
# A local `make index` keeps its own ledger; publishing passes the live site's (see wheels.yml).
LEDGER     ?= $(INDEX_DIR)-ledger.json
PORT       ?= 8765
# A new ledger only for a new index: neither LEDGER nor a site in INDEX_DIR yet. Without LEDGER
# over an existing site the index refuses, and says how to go on (--init-ledger: from the site's
# own ledger.json; --start-over: without its files, each named).
INIT_LEDGER ?= $(if $(wildcard $(LEDGER) $(INDEX_DIR)/ledger.json),,--init-ledger)
INDEX_FLAGS ?=

.PHONY: help setup test test-slow demo probe index serve recipes lint docs clean

# The extras `make setup` installs: the farm's build tools and the test tools. Build jobs in CI
# take EXTRAS=farm: they never run the tests (zizmor, among the test tools, has no aarch64 wheel).
EXTRAS ?= farm,test

## setup: create .venv with the project's pinned tools (pyproject.toml: EXTRAS, default farm,test)
setup: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

## test: the test suite (what CI runs), in TEST_WORKERS processes (default 2), a test file each
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

## test-slow: real builds of real recipes (minutes to hours)
test-slow: setup
	$(PY) -m pytest -m slow

## demo: build causal_conv1d for this machine, index it, serve it, pip install it, import it
demo: setup
	$(PY) -m tools.demo $(ARGS)

## probe: compile a cell's heaviest units with its own build's command lines (CELL=id ARGS=...)
probe: setup
	$(PY) -m tools.probe $(CELL) $(ARGS)

## index: emit the package index from WHEELS_DIR into INDEX_DIR
index: setup
	$(PY) -m tools.index --wheels $(WHEELS_DIR) --site $(INDEX_DIR) \
	    --base-url $(BASE_URL) --ledger $(LEDGER) --yanked $(YANKED) $(INIT_LEDGER) $(INDEX_FLAGS)

## serve: serve INDEX_DIR (and WHEELS_DIR under /files/) on 127.0.0.1:PORT
serve: setup
	$(PY) -m tools.serve --site $(INDEX_DIR) --wheels $(WHEELS_DIR) --port $(PORT)

## recipes: validate every recipe
recipes: setup
	$(PY) -m tools.recipe

## lint: actionlint + zizmor on .github/workflows
lint: setup
	$(PY) -m tools.lint_workflows

## docs: regenerate the docs' generated parts, then build docs/ into DOCS_DIR (build/docs), strict (a warning or a broken link fails)
DOCS_DIR ?= build/docs
docs: setup
	$(PY) -m tools.devtools.docpages
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir $(DOCS_DIR)

## clean: remove what builds and indexes left in the checkout (build-cells, wheelhouse, site, .nox)
clean:
	rm -rf build-cells wheelhouse site .nox

## help: every target with one line (from the `## target:` line above each)
help:
	@sed -n 's/^## \([a-z-]*\): /\1\t/p' $(MAKEFILE_LIST) | expand -t 12
