-- Every thread inserts the same key into one table: a unique violation (SQLSTATE 23505)
-- on the second insert. The table is made by thread 0 before the load.
function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   if sysbench.tid == 0 then
      con:query("CREATE TABLE IF NOT EXISTS sb_unique (id int PRIMARY KEY)")
      con:query("TRUNCATE sb_unique")
   end
end

function event()
   con:query("SELECT pg_sleep(0.2)")
   con:query("INSERT INTO sb_unique VALUES (1)")
end

function thread_done()
   con:disconnect()
end
