# The two commands: `make up` runs the whole platform, `make test` runs every test.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE ?= portal.settings.local

.PHONY: up test install services browser tools sandbox secrets db migrate seed lint typecheck pytest clean

# requirements.lock: every package, pinned with its hashes, resolved by uv from requirements.txt. It follows
# requirements.txt (its sha256 is in the lock; make regenerates the lock when they differ, keeping what need
# not move), and .venv is installed from it with uv; pip with requirements.txt is the fallback
# (deploy/local/venv.sh; PIP_ONLY=1 forces it).
requirements.lock: requirements.txt
	@bash deploy/local/venv.sh lock

$(VENV)/.installed: requirements.lock
	@bash deploy/local/venv.sh install
	touch $@

install: $(VENV)/.installed

services:
	@bash deploy/local/services.sh

# Browser tests drive Debian's Chromium through Playwright (never a downloaded browser build).
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# Debian's kubectl 1.20 (package kubernetes-client), unpacked under var/tools rather than installed (it would
# replace /usr/bin/kubectl): kubesim's OpenAPI tests drive it as the oldest kubectl kubesim supports, and skip
# when it could not be fetched.
KUBECTL_1_20 := var/tools/kubectl-1.20/usr/bin/kubectl
$(KUBECTL_1_20):
	@mkdir -p var/tools/deb
	@cd var/tools/deb && { apt-get download kubernetes-client >/dev/null 2>&1 \
		|| { apt-get update -qq && apt-get download kubernetes-client >/dev/null 2>&1; }; } \
		&& dpkg -x kubernetes-client_*.deb ../kubectl-1.20 && rm -f kubernetes-client_*.deb \
		|| echo "kubectl 1.20 could not be fetched; the tests that need it will skip"

# The SSO tests' OpenID provider (tests/oidc: panva's oidc-provider on Node.js), installed from its lock file;
# without Node.js the tests that need it skip.
OIDC_PROVIDER := tests/oidc/node_modules/.installed
$(OIDC_PROVIDER): tests/oidc/package-lock.json
	@if command -v npm >/dev/null; then cd tests/oidc && { npm ci --no-audit --no-fund --loglevel=error \
		&& touch node_modules/.installed || echo "npm ci failed: the SSO tests (tests/sso) will skip"; }; \
	else echo "npm is missing: the SSO tests (tests/sso) will skip"; fi

tools: $(KUBECTL_1_20) $(OIDC_PROVIDER)

# kubesim runs each container under bubblewrap (its own mount and PID namespaces); without it, it warns
# and falls back to plain processes that share this machine's filesystem.
sandbox:
	@test -x /usr/bin/bwrap || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap)
	@test -x /usr/sbin/nft || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables)
	@test -x /usr/sbin/ip || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2)

# This machine's own SECRET_KEY and credentials key, made at the first run and kept (mode 0600); the local
# settings read them, the environment still wins (docs/operations.md, "Secrets").
secrets: install
	@$(PY) -m portal.secretkeys var/secrets.env

db: services
	@$(PY) manage.py ensure_database

migrate: install secrets db
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_demo

up: sandbox seed
	@mkdir -p var
	@echo
	@echo "Trainyard is starting:  http://127.0.0.1:$${WEB_PORT:-8000}/   admin console: http://127.0.0.1:$${WEB_PORT:-8000}/admin/"
	@echo "Logins: admin / admin (superuser), demo / demo (member of tenant 'demo'). Ctrl-C stops everything."
	@echo "Embedded S3 for the examples: http://$${S3_DEMO_HOST:-127.0.0.1}:$${S3_DEMO_PORT:-9000} (bucket trainyard-demo; tenant demo's data-store secret demo-s3)."
	@echo "API token for demo (for the CLI: .venv/bin/python -m trainyard login http://127.0.0.1:$${WEB_PORT:-8000} --token ...):"
	@$(PY) manage.py token create --user demo --name "make up" --keep var/demo-token
	@echo
	$(VENV)/bin/honcho start -f Procfile

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy .

# The suite on PYTEST_WORKERS pytest-xdist workers, each test file whole on one worker (docs/testing.md,
# "Parallel runs"); most tests wait on kubesim, a server or a browser, so 4 pay off on 2 cores.
# PYTEST_WORKERS=0 runs it in this one process. `.venv/bin/pytest FILE` alone runs serially.
PYTEST_WORKERS ?= 4
pytest: install services browser tools sandbox
	DJANGO_SETTINGS_MODULE=portal.settings.test $(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
