# Integrations (issue "Meet users where they are"): Celery, Django, FastAPI/Starlette. Their
# tests live in tests/integrations and run in `make test` with the test extra (Celery 5, the
# django-tasks backport on Django 4.2-5.2, FastAPI). Django 6's own django.tasks needs
# Python 3.12+, so a second venv (.venv-django6) is made with python3.12 for the test that
# runs examples/django under Django 6 (tests/integrations/test_django6.py).
# The first Python 3.12+ that runs: python3.12 on PATH (a pyenv shim runs only when 3.12 is
# selected, so pyenv's own 3.12/3.13 builds are tried too).
PY312 ?= $(shell for c in python3.12 python3.13 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null); do \
  $$c -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { echo $$c; break; }; done)
DJANGO6_VENV := .venv-django6
DJANGO6_STAMP := $(DJANGO6_VENV)/.installed

.PHONY: django6-venv test-integrations

$(DJANGO6_STAMP): pyproject.toml
	@if [ -z "$(PY312)" ]; then \
	  echo "cannot make $(DJANGO6_VENV): no working Python 3.12+ (python3.12 on PATH, or pyenv's);" \
	       "Django 6 needs one, so tests/integrations/test_django6.py will fail"; exit 0; fi; \
	test -x $(DJANGO6_VENV)/bin/python || $(PY312) -m venv $(DJANGO6_VENV); \
	$(DJANGO6_VENV)/bin/python -m pip install -q --upgrade pip && \
	$(DJANGO6_VENV)/bin/python -m pip install -q -e . "django>=6.0,<7" && \
	touch $(DJANGO6_STAMP)

django6-venv: $(DJANGO6_STAMP)

TEST_DEPS += django6-venv

test-integrations: venv redis django6-venv
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integrations $(PYTEST_ARGS)
