# One target does what CI does: `make test`. `make run` starts a demo service from nothing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install run test lint typecheck bench soak tools clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,embedded]'
	touch $@

install: $(VENV)/.installed

# Test-only clients and tools installed locally (Node 22, the TypeScript SDK, the
# conformance suite): each script is idempotent and installs under .tools/.
tools: install
	@for s in tests/*/install.sh; do [ -f "$$s" ] && bash "$$s" || exit 1; done

run: install
	$(BIN)/elova-mcp run-demo

test: install tools
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check service tests
	$(BIN)/ruff format --check service tests
	$(BIN)/mypy

bench: install tools
	$(BIN)/python -m tests.bench

soak: install tools
	$(BIN)/python -m tests.soak

clean:
	rm -rf $(VENV) .tools .data
