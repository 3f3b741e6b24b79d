# Clients in other languages (issue "Enqueue from any language"): the Node.js client and
# worker in examples/node, the bash + redis-cli enqueue in examples/shell, and the tests that
# run them against the Python dispatcher and worker. `make test` runs these tests too; the
# Node dependencies are installed by the test set-up (npm ci), or here with `make node-deps`.
NODE_DIR := examples/node

.PHONY: node-deps test-clients

node-deps:
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error

test-clients: venv redis
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_cross_language.py \
	  tests/integration/test_node_worker_clock.py \
	  tests/scripts/test_foreign_bad_input.py tests/unit/protocol/test_protocol_doc.py $(PYTEST_ARGS)
