# Benchmarks (issue "Performance"): `make bench` runs zsched's scenarios against a private
# redis-server; `make bench-peers` installs BullMQ, Celery, saq, arq and RQ into a separate
# environment (bench/peers/.venv, bench/peers/node_modules) and runs the same workloads on
# each, interleaved with zsched and the bare minimum. Results go to bench-results/ (gitignored).
PEERS_DIR := bench/peers
PEERS_VENV := $(PEERS_DIR)/.venv
PEERS_STAMP := $(PEERS_VENV)/.installed
BENCH_ARGS ?=
PEERS_ARGS ?=
# Both tables of BENCHMARKS.md: every contender at equal settings (concurrency 50, then 1,000),
# then each at its own tuning (and zsched at its CLI defaults). PEERS_TABLES= : the tuned only.
PEERS_TABLES ?= --concurrency 50 1000 --tuned

.PHONY: bench bench-smoke bench-peers peers-env

bench: venv redis
	$(BIN)/python -m bench $(BENCH_ARGS)
	@# The full run includes the scaling scenario (1, 2, 3 masters; mk/cluster.mk).
	@if [ -z "$(BENCH_ARGS)" ]; then $(BIN)/python -m bench.scaling $(SCALING_ARGS); fi

bench-smoke: venv redis
	$(BIN)/python -m bench --smoke

# The peers live in their own venv so their pins never touch zsched's environment. The peers'
# venv gets zsched too (editable) so every contender runs under the same interpreter.
$(PEERS_STAMP): $(PEERS_DIR)/requirements.txt $(PEERS_DIR)/package.json pyproject.toml
	@test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -r $(PEERS_DIR)/requirements.txt -e .
	cd $(PEERS_DIR) && npm install --no-audit --no-fund --silent
	@touch $(PEERS_STAMP)

peers-env: $(PEERS_STAMP)

bench-peers: venv redis peers-env
	$(PEERS_VENV)/bin/python -m bench.peers $(PEERS_TABLES) $(PEERS_ARGS)
