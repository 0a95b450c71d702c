#!/usr/bin/env bash
# Make sure the local PostgreSQL and Redis answer, starting them the way this machine kind does if not.
set -euo pipefail

if ! pg_isready -q; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
for _ in $(seq 1 30); do
  pg_isready -q && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "PostgreSQL or Redis did not come up" >&2
exit 1
