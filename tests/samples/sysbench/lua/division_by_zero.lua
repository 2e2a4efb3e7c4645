-- Thread 0 runs a statement that fails with an error sysbench's pgsql driver does not
-- ignore (SQLSTATE 22012) once the load has run for 2 s; the other threads go on.
function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   started = os.time()
end

function event()
   con:query("SELECT pg_sleep(0.01)")
   if sysbench.tid == 0 and os.time() - started >= 2 then
      con:query("SELECT 1 / 0")
   end
end

function thread_done()
   con:disconnect()
end
