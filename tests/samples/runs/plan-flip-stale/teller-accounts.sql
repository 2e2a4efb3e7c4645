\set bid random(1, 5 * :scale)
SELECT sum(a.abalance) FROM pgbench_tellers t
  JOIN pgbench_accounts a ON a.aid = t.tid * 9973 WHERE t.bid = :bid;
