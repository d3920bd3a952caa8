# Set-up for the job store's Postgres tests (sourced by .ci/run under `set -euo pipefail`).
#
# - installs Debian's postgresql if missing and starts its cluster on loopback
#   (pg_ctlcluster runs the server as the postgres user, so this works as root);
# - creates a login role with CREATEDB (each test makes its own database) and a database;
# - drops the per-test databases (t_*) a previous run left;
# - serves TLS with a certificate from a test CA of its own (made with openssl), so the tests
#   can connect with sslmode=verify-full, and makes a second, unrelated CA to be refused under;
# - exports GIT_AGENT_TEST_DATABASE_URL, GIT_AGENT_TEST_DATABASE_CA and
#   GIT_AGENT_TEST_DATABASE_OTHER_CA. The Postgres tests fail loudly without them.
# Idempotent: each step is skipped when its result is already in place.

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi
if ! command -v openssl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq openssl >/dev/null
fi

PG_VERSION="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
PG_CLUSTER=main
if ! pg_lsclusters -h | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1==v && $2==c {f=1} END {exit !f}'; then
  pg_createcluster "$PG_VERSION" "$PG_CLUSTER" -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null
fi
PG_PORT="$(pg_lsclusters -h | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1==v && $2==c {print $3}')"
if ! pg_lsclusters -h | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1==v && $2==c && $4=="online" {f=1} END {exit !f}'; then
  pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start
fi

pg_psql() { runuser -u postgres -- psql -p "$PG_PORT" -X -q -v ON_ERROR_STOP=1 "$@"; }
for _ in $(seq 1 30); do
  pg_psql -c 'SELECT 1' >/dev/null 2>&1 && break
  sleep 1
done
if ! pg_psql -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'git_agent_test'" | grep -q 1; then
  pg_psql -c "CREATE ROLE git_agent_test LOGIN CREATEDB PASSWORD 'git_agent_test'"
fi
if ! pg_psql -tAc "SELECT 1 FROM pg_database WHERE datname = 'git_agent_test'" | grep -q 1; then
  pg_psql -c "CREATE DATABASE git_agent_test OWNER git_agent_test"
fi
for db in $(pg_psql -tAc "SELECT datname FROM pg_database WHERE datname LIKE 't\_%'"); do
  # WITH (FORCE): a process left over from an earlier run (a killed test) may still hold one.
  pg_psql -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null
done
PG_TLS_DIR=/var/lib/postgresql/git-agent-test-tls
if [ ! -s "$PG_TLS_DIR/server.crt" ] || [ ! -s "$PG_TLS_DIR/other-ca.crt" ]; then
  rm -rf "$PG_TLS_DIR"
  mkdir -p "$PG_TLS_DIR"
  (
    cd "$PG_TLS_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=git-agent test CA" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.crt 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=another CA" \
      -keyout other-ca.key -out other-ca.crt 2>/dev/null
  )
  chown -R postgres:postgres "$PG_TLS_DIR"
  chmod 600 "$PG_TLS_DIR"/*.key
fi
if [ "$(pg_psql -tAc 'SHOW ssl')" != on ] ||
  [ "$(pg_psql -tAc 'SHOW ssl_cert_file')" != "$PG_TLS_DIR/server.crt" ]; then
  pg_psql -c "ALTER SYSTEM SET ssl_cert_file = '$PG_TLS_DIR/server.crt'"
  pg_psql -c "ALTER SYSTEM SET ssl_key_file = '$PG_TLS_DIR/server.key'"
  pg_psql -c "ALTER SYSTEM SET ssl = on"
  pg_psql -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 30); do
    [ "$(pg_psql -tAc 'SHOW ssl_cert_file')" = "$PG_TLS_DIR/server.crt" ] && break
    sleep 0.2
  done
fi
export GIT_AGENT_TEST_DATABASE_CA="$PG_TLS_DIR/ca.crt"
export GIT_AGENT_TEST_DATABASE_OTHER_CA="$PG_TLS_DIR/other-ca.crt"
export GIT_AGENT_TEST_DATABASE_URL="postgres://git_agent_test:git_agent_test@127.0.0.1:$PG_PORT/git_agent_test"
