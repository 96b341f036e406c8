-- Address windows of the failed sign-in throttle that ended long ago are forgotten a few at
-- a time by each recorded failure (service/auth/oauth/throttle.py), as pairs are: the table
-- was never swept before (issue 42).
-- reviewed: signin_throttle holds one row a key that ever failed to sign in (never swept
-- until now); 1,000,000 rows index in 0.22 s here, and a plain build blocks only writes to
-- it (recording a failed sign-in), never reads, within the runner's 1 s lock timeout. Not
-- CONCURRENTLY: concurrent runners (several replicas' init containers) each building it
-- CONCURRENTLY deadlock on each other (docs/decisions/migrations.md).
CREATE INDEX signin_throttle_window ON signin_throttle (window_start);
