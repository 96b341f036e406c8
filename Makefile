# One target does what CI does: `make test`. `make run` starts a demo service from nothing.

# A supported Python (pyproject's requires-python: 3.11, 3.12, 3.13), newest first: python3.X
# on PATH if it runs (a pyenv shim for a version not selected does not), else pyenv's own
# copy. `make PYTHON=/path/to/python3.12 ...` chooses one. 3.13 is the image's and CI's
# default (docs/decisions/tooling.md, "Python versions").
SUPPORTED_PYTHONS := 3.13 3.12 3.11
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for v in $(SUPPORTED_PYTHONS); do \
	for c in python$$v $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v*/bin/python$$v \
		2>/dev/null | sort -V -r); do \
	"$$c" -c '' >/dev/null 2>&1 && { echo "$$c"; exit 0; }; done; done)
endif
PY_SUPPORTED := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
VENV   := .venv
BIN    := $(VENV)/bin

# The lock tool (docs/decisions/tooling.md); `make lock LOCK_FLAGS=--upgrade` moves every pin.
UV_VERSION := 0.13.8
LOCK_FLAGS ?=
LOCK := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 \
	--custom-compile-command 'make lock' $(LOCK_FLAGS)

.PHONY: install python-check lock run test check lint bench soak tools clean

# Dependencies come from the dev lockfile only; the project itself adds none (--no-deps).
# A .venv made by another Python version is made anew.
$(VENV)/.installed: pyproject.toml requirements/dev.txt
	@$(MAKE) --no-print-directory python-check
	@if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -V 2>&1 | cut -d. -f1,2)" != \
		"$$($(PYTHON) -V 2>&1 | cut -d. -f1,2)" ]; then $(PYTHON) -m venv --clear $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements/dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

python-check:
	@test -n "$(PYTHON)" && "$(PYTHON)" -c '$(PY_SUPPORTED)' 2>/dev/null || { echo \
		"elova-mcp needs Python 3.11, 3.12 or 3.13 (3.13 preferred; found: $(or $(PYTHON),none)):" \
		"install one (python.org, your package manager or pyenv), or make PYTHON=/path/to/python3.13" \
		>&2; exit 1; }

$(BIN)/uv:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)

# runtime.txt: pyproject's dependencies (what deploy/Dockerfile installs); dev.txt: those
# same versions plus the dev and embedded extras (what `make install` installs). Existing
# pins are kept unless LOCK_FLAGS says otherwise (--upgrade, --upgrade-package NAME).
lock: $(BIN)/uv
	$(LOCK) pyproject.toml -o requirements/runtime.txt
	$(LOCK) pyproject.toml --extra dev --extra embedded -c requirements/runtime.txt \
		-o requirements/dev.txt

# Test-only clients and tools installed locally (Node 22, the TypeScript SDK, the
# conformance suite): each script is idempotent and installs under .tools/.
tools: install
	@for s in tests/*/install.sh; do [ -f "$$s" ] && bash "$$s" || exit 1; done

run: install
	$(BIN)/elova-mcp run-demo

# Branch coverage of service/, with the floor in pyproject's [tool.coverage.report], over
# three pytest runs (tests/run.sh; docs/decisions/tooling.md, "Test wall time"): the `slow`
# tests beside the rest, then the `alone` ones by themselves. TEST_ARGS go to each run.
TEST_ARGS ?=
test: install tools
	bash tests/run.sh $(TEST_ARGS)

# The fast loop: lint, types and the tests marked `unit` (pytest -m unit): those that need no
# PostgreSQL, Redis, browser, Node or other installed tool, in well under a minute. A new pure
# test module says so with `pytestmark = pytest.mark.unit`; tests/conftest.py fails a `unit`
# test that reaches the test database.
check: install
	$(BIN)/ruff check service tests
	$(BIN)/ruff format --check service tests
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider -m unit

lint: install
	$(BIN)/ruff check service tests
	$(BIN)/ruff format --check service tests
	$(BIN)/mypy

# Every section of docs/benchmarks.md in one run; BENCH_ARGS passes flags, e.g.
# `make bench BENCH_ARGS="--baseline cf8c545"` (old against new) or "--quick --flood-only".
# The peers (a TypeScript SDK server, a FastMCP server) are installed here only, not by
# `make tools`: tests/bench/peers/install.sh (docs/decisions/bench-peers.md).
BENCH_ARGS ?=
bench: install tools
	PYTHON=$(PYTHON) bash tests/bench/peers/install.sh
	$(BIN)/python -m tests.bench $(BENCH_ARGS)

# `make soak SOAK_ARGS="--rolling --minutes 3"`: replicas behind HAProxy, restarted in turn.
SOAK_ARGS ?=
soak: install tools
	$(BIN)/python -m tests.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .tools .data
