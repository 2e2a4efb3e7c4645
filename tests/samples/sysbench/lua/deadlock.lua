-- Two sessions update the same two rows of sbtest1 in opposite order: a deadlock
-- (SQLSTATE 40P01) within the first seconds. Run with an even --threads.
function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function event()
   local first, second = 1, 2
   if sysbench.tid % 2 == 1 then first, second = 2, 1 end
   con:query("BEGIN")
   con:query("UPDATE sbtest1 SET k = k + 1 WHERE id = " .. first)
   con:query("SELECT pg_sleep(0.05)")
   con:query("UPDATE sbtest1 SET k = k + 1 WHERE id = " .. second)
   con:query("COMMIT")
end

function thread_done()
   con:disconnect()
end
