# Reliability (issue "Reliability and security"): `make chaos` runs the fault-injection suite
# (20,000 runs over 60 s under SIGKILLs, zombies, redis-server restarts from its AOF, SCRIPT
# FLUSH and CLIENT KILL; a 20-second smoke version runs inside `make test`). `make soak` runs
# the load soak: 5,000 runs a second for SOAK_SECONDS (600 by default). See docs/reliability.md.
CHAOS_ARGS ?=
SOAK_SECONDS ?= 600
SOAK_RATE ?= 5000
SOAK_ARGS ?=

.PHONY: chaos chaos-smoke soak

chaos: venv redis
	$(BIN)/python tests/chaos/chaos_main.py $(CHAOS_ARGS)

chaos-smoke: venv redis
	$(BIN)/python tests/chaos/chaos_main.py --smoke $(CHAOS_ARGS)

soak: venv redis
	$(BIN)/python tests/chaos/soak.py --seconds $(SOAK_SECONDS) --rate $(SOAK_RATE) $(SOAK_ARGS)
