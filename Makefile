# The two commands: `make up` runs the whole platform, `make test` runs every test.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE ?= portal.settings.local

.PHONY: up test install services browser sandbox db migrate seed lint typecheck pytest clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

install: $(VENV)/.installed

services:
	@bash deploy/local/services.sh

# Browser tests drive Debian's Chromium through Playwright (never a downloaded browser build).
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# kubesim runs each container under bubblewrap (its own mount and PID namespaces); without it, it warns
# and falls back to plain processes that share this machine's filesystem.
sandbox:
	@test -x /usr/bin/bwrap || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap)

db: services
	@psql -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='trainyard'" | grep -q 1 || createdb trainyard

migrate: install db
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_demo

up: sandbox seed
	@mkdir -p var
	@echo
	@echo "Trainyard is starting:  http://127.0.0.1:$${WEB_PORT:-8000}/   admin console: http://127.0.0.1:$${WEB_PORT:-8000}/admin/"
	@echo "Logins: admin / admin (superuser), demo / demo (member of tenant 'demo'). Ctrl-C stops everything."
	@echo "API token for demo (for the CLI: .venv/bin/python -m trainyard login http://127.0.0.1:$${WEB_PORT:-8000} --token ...):"
	@$(PY) manage.py token create --user demo --name "make up"
	@echo
	$(VENV)/bin/honcho start -f Procfile

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy .

pytest: install services browser sandbox
	DJANGO_SETTINGS_MODULE=portal.settings.test $(VENV)/bin/pytest

test: lint typecheck pytest

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
