-- Updates the two branch rows (scale 2) in random order: concurrent clients deadlock.
\set a random(1, 2)
\set b 3 - :a
BEGIN;
UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = :a;
SELECT pg_sleep(0.002);
UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = :b;
END;
