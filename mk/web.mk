# The operator console's browser tests (tests/web/test_console_browser.py) drive Debian's
# chromium through Playwright's Python package (no browser download): installed here when
# /usr/bin/chromium is missing, as the Makefile installs redis-server.
.PHONY: chromium

chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium with apt-get"; \
	  (apt-get update -qq && $(APT_INSTALL) chromium) >/dev/null; \
	else echo "warning: cannot install chromium (not root); the console's browser tests will fail"; fi

TEST_DEPS += chromium
