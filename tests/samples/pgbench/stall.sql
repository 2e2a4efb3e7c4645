-- Every transaction takes 1.5 s: some one-second progress intervals complete nothing.
SELECT pg_sleep(1.5);
