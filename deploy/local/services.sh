#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis that DATABASE_URL and REDIS_URL name answer (the settings' defaults,
# postgres:///trainyard and redis://127.0.0.1:6379/0, when unset; the environment first, then .env, as the
# settings read them), starting them the way this machine kind does if they are local and not up: the
# local PostgreSQL cluster that listens on that port, a Redis on that port. A remote one that does not
# answer is reported, not started.
set -euo pipefail
cd "$(dirname "$0")/../.."

# host, port of a URL (a socket path or an empty host: local).
read -r PG_HOST PG_PORT REDIS_HOST REDIS_PORT < <(python3 - <<'EOF'
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

def setting(name, default):
    if os.environ.get(name):
        return os.environ[name]
    env = Path(".env")
    if env.exists():
        for line in env.read_text().splitlines():
            key, sep, value = line.strip().removeprefix("export ").partition("=")
            if sep and key.strip() == name:
                return value.strip().strip("'\"")
    return default

db = urlsplit(setting("DATABASE_URL", "postgres:///trainyard"))
rd = urlsplit(setting("REDIS_URL", "redis://127.0.0.1:6379/0"))
print(unquote(db.hostname or "") or "-", db.port or 5432, rd.hostname or "127.0.0.1", rd.port or 6379)
EOF
)

is_local() { [[ "$1" == "-" || "$1" == /* || "$1" == "localhost" || "$1" == "127.0.0.1" || "$1" == "::1" ]]; }
pg_answers() {
  if [[ "$PG_HOST" == "-" ]]; then pg_isready -q -p "$PG_PORT"; else pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; fi
}
redis_answers() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping >/dev/null 2>&1; }

if ! pg_answers; then
  if ! is_local "$PG_HOST"; then
    echo "PostgreSQL at $PG_HOST:$PG_PORT (DATABASE_URL) does not answer" >&2
    exit 1
  fi
  cluster=$(pg_lsclusters --no-header 2>/dev/null | awk -v port="$PG_PORT" '$3 == port {print $1, $2; exit}')
  if [[ -z "$cluster" ]]; then
    echo "no local PostgreSQL cluster listens on port $PG_PORT (DATABASE_URL); pg_lsclusters lists them" >&2
    exit 1
  fi
  echo "starting PostgreSQL $cluster on port $PG_PORT"
  # shellcheck disable=SC2086
  pg_ctlcluster --skip-systemctl-redirect $cluster start
fi
if ! redis_answers; then
  if ! is_local "$REDIS_HOST"; then
    echo "Redis at $REDIS_HOST:$REDIS_PORT (REDIS_URL) does not answer" >&2
    exit 1
  fi
  echo "starting Redis on port $REDIS_PORT"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile "/var/log/redis/ci-$REDIS_PORT.log"
fi
for _ in $(seq 1 30); do
  pg_answers && redis_answers && exit 0
  sleep 1
done
echo "PostgreSQL ($PG_HOST:$PG_PORT) or Redis ($REDIS_HOST:$REDIS_PORT) did not come up" >&2
exit 1
