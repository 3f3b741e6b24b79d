# The executable reference model of rules (issue 18, "Rules keep their word where policies
# meet"). `make test` runs tests/model with a bounded, derandomised profile (12 examples
# per misfire x overlap combination: 78 s on a quiet machine, docs/reliability.md). `make model` is the weekly long exploration:
# new random examples each run (MODEL_EXAMPLES per combination, 9 combinations: 20,000 in
# all by default), printing what they covered; record the result in docs/reliability.md.
# MODEL_JOBS=2 runs the combinations in 2 processes (combinations i, i+2, ...; each job's
# lines prefixed [job i]); the exit status is the worst job's.
MODEL_EXAMPLES ?= 2223
MODEL_STEPS ?= 15
MODEL_JOBS ?= 1

.PHONY: model

model: venv redis
	@pids=""; for i in $$(seq 0 $$(($(MODEL_JOBS) - 1))); do \
	  ( ZSCHED_MODEL_SHARD=$$i/$(MODEL_JOBS) ZSCHED_MODEL_EXAMPLES=$(MODEL_EXAMPLES) \
	    ZSCHED_MODEL_STEPS=$(MODEL_STEPS) ZSCHED_MODEL_RANDOM=1 ZSCHED_MODEL_TIMEOUT=0 \
	    $(BIN)/python -m pytest -q -s -p no:cacheprovider \
	    tests/model/test_rule_machine.py $(PYTEST_ARGS) 2>&1 | sed -u "s/^/[job $$i] /"; \
	    exit $${PIPESTATUS[0]} ) & pids="$$pids $$!"; \
	done; rc=0; for p in $$pids; do wait $$p || rc=1; done; exit $$rc
