#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/pgbadger/postgresql.log from a REAL PostgreSQL 15
# (Debian's package postgresql-15) logging with the log_line_prefix that pgBadger's
# documentation asks stderr users for, '%t [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h ',
# and with log_connections / log_disconnections on, as deployments read by pgBadger
# usually have them (most of such a log is connection lines).
#
#   sudo tests/samples/serverlog/pgbadger/make_sample.sh
#
# The script provokes, by user@database (app names: psql, and `batch` for the holder):
#   - app@orders: 2 statements logged by log_min_duration_statement = 50ms;
#   - app@orders holds a row lock for 1 s (application_name batch); report@orders waits
#     for it (lock wait, then acquired);
#   - postgres@postgres: CHECKPOINT (requested), then the fast shutdown's checkpoint;
#   - a sort under work_mem = 64kB (a temp file);
#   - a login to a database that does not exist (FATAL).
# Clients connect over TCP (127.0.0.1), so %h prints the address.
#
# Needs root (the server runs as `nobody`). Data directory under /tmp, removed on exit;
# the server is stopped even on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${PG15_BIN:-/usr/lib/postgresql/15/bin}
ROOT=${WORK:-/tmp/pglab-pgbadger-sample}
PORT=${PORT:-55521}
RUNAS=nobody

log() { printf '== %s\n' "$*" >&2; }
[[ -x $BIN/postgres ]] || { echo "needs $BIN/postgres: apt-get install postgresql-15" >&2; exit 1; }

DATA=$ROOT/data
stop() {
    if [[ -f $DATA/postmaster.pid ]]; then
        (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop) \
            >/dev/null 2>&1 || true
    fi
    rm -rf "$ROOT"
}
trap stop EXIT

rm -rf "$ROOT"
mkdir -p "$ROOT/sock"
chown -R "$RUNAS" "$ROOT"
chmod 700 "$ROOT/sock"
cd /tmp
runuser -u "$RUNAS" -- "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
    --locale=C >/dev/null
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$ROOT/sock'
port = $PORT
lc_messages = 'C'
log_timezone = 'UTC'
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%t [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h '
log_connections = on
log_disconnections = on
log_checkpoints = on
log_lock_waits = on
deadlock_timeout = 100ms
log_temp_files = 0
log_min_duration_statement = 50
autovacuum = off
shared_buffers = 16MB
max_connections = 20
EOF
runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/postgresql.log" -w start >/dev/null

sql() {  # user database, then psql arguments; always over TCP
    local user=$1 db=$2
    shift 2
    env -u PGOPTIONS LC_ALL=C PGHOST=127.0.0.1 PGPORT="$PORT" PGUSER="$user" PGDATABASE="$db" \
        "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

log "roles, database, table"
sql postgres postgres -c "CREATE ROLE app LOGIN" -c "CREATE ROLE report LOGIN"
sql postgres postgres -c "CREATE DATABASE orders OWNER app"
sql app orders -c "CREATE TABLE accounts (id int PRIMARY KEY, balance int)" \
    -c "INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 20000) g" \
    -c "GRANT SELECT, UPDATE ON accounts TO report"

log "2 slow statements of app@orders"
sql app orders -c "SELECT pg_sleep(0.2)" >/dev/null
sql app orders -c "SELECT pg_sleep(0.1)" >/dev/null

log "a temp file: a sort under work_mem = 64kB"
sql app orders -c "SET work_mem = '64kB'" \
    -c "SELECT id FROM accounts ORDER BY balance, id DESC" >/dev/null

log "lock wait: app@orders (batch) holds a row, report@orders waits, then gets it"
PGAPPNAME=batch sql app orders -c "BEGIN" -c "UPDATE accounts SET balance = 0 WHERE id = 1" \
    -c "SELECT pg_sleep(1)" -c "COMMIT" >/dev/null &
holder=$!
sleep 0.3
sql report orders -c "UPDATE accounts SET balance = 1 WHERE id = 1"
wait "$holder"

log "a login to a missing database (FATAL)"
sql app nosuchdb -c "SELECT 1" 2>/dev/null || true

log "requested checkpoint, fast shutdown"
sql postgres postgres -c "CHECKPOINT"
(cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null
cp "$ROOT/postgresql.log" "$HERE/postgresql.log"
chmod 644 "$HERE/postgresql.log"
"$BIN/postgres" --version >"$HERE/version.txt"
log "done: $(wc -l <"$HERE/postgresql.log") lines"
