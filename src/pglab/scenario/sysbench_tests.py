"""What a sysbench workload may name: the tests bundled with sysbench 1.0 (Debian's
package installs them as /usr/share/sysbench/<name>.lua), and the options pglab sets
itself. The scenario model checks against these without sysbench installed; the runner
(workload/sysbench.py) builds its command line from the same names.
"""

from __future__ import annotations

# sysbench 1.0's bundled database tests (bulk_insert has no `run` phase of its own kind
# worth a lab run, but sysbench accepts it, so it is listed too).
SYSBENCH_TESTS = (
    "oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select",
    "oltp_update_index", "oltp_update_non_index", "oltp_insert", "oltp_delete",
    "select_random_points", "select_random_ranges", "bulk_insert",
)
# Lua scripts shipped with pglab (src/pglab/workload/sysbench_lua/), named like a bundled
# test: "select-1" is one `SELECT 1` an event, the connection path's round trip.
PGLAB_TESTS = {"select-1": "select_1.lua"}
# Tests that never write: the only ones a read-only target could run.
READ_ONLY_TESTS = frozenset({"oltp_read_only", "oltp_point_select", "select_random_points",
                             "select_random_ranges", "select-1"})

# Options pglab passes itself, from the workload key that sets them: `options` may not
# name them (a second --threads would silently win or lose).
MANAGED_OPTIONS = {
    "threads": "workload.threads", "time": "workload.duration and workload.warmup",
    "rate": "workload.rate", "percentile": "workload.percentile",
    "tables": "workload.tables", "table-size": "workload.table_size",
    "table_size": "workload.table_size", "report-interval": "pglab (1 s)",
    "histogram": "pglab (off)", "events": "pglab (the load is timed)",
    "db-driver": "pglab (pgsql)", "warmup-time": "workload.warmup",
}
# Connection options: the lab's server, always.
MANAGED_PREFIXES = ("pgsql-", "mysql-")
