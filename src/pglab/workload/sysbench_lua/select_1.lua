-- pglab's "select-1" sysbench test: one `SELECT 1` an event, on a connection each thread
-- keeps. No table is read and nothing is planned worth the name, so an event's latency is
-- the round trip of the connection path (workload.path: Unix socket, loopback TCP).
-- It makes no tables: sysbench's `prepare` says the test does not implement it, and
-- pglab goes on.

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function thread_done()
   con:disconnect()
end

function event()
   con:query("SELECT 1")
end
