#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432, trust auth, database `test`) and Redis (127.0.0.1:6379) run,
# installing them from Debian's packages when absent. Fails loudly if either cannot be reached.
set -euo pipefail

need_install=()
command -v pg_ctlcluster >/dev/null 2>&1 || need_install+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_install+=(redis-server)
if [ ${#need_install[@]} -gt 0 ]; then
  echo "installing ${need_install[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_install[@]}"
fi

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }
if ! pg_up; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
pg_up || { echo "ERROR: PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1" test >/dev/null 2>&1; then
  # A freshly installed cluster: trust local TCP connections and create the `test` database.
  conf=$(ls /etc/postgresql/*/main/pg_hba.conf | head -n1)
  sed -i -E 's/^(host\s+all\s+all\s+127\.0\.0\.1\/32\s+)\S+/\1trust/; s/^(host\s+all\s+all\s+::1\/128\s+)\S+/\1trust/' "$conf"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main reload
  su postgres -c "createdb test" 2>/dev/null || true
fi
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1" test >/dev/null \
  || { echo "ERROR: cannot connect to PostgreSQL database 'test' as postgres" >&2; exit 1; }

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
if ! redis_up; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis_up && break; sleep 0.5; done
fi
redis_up || { echo "ERROR: Redis is not reachable on 127.0.0.1:6379" >&2; exit 1; }
echo "PostgreSQL and Redis are up"
