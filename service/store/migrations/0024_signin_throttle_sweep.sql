-- Address windows of the failed sign-in throttle that ended long ago are forgotten a few at
-- a time by each recorded failure (service/auth/oauth/throttle.py), as pairs are: the table
-- was never swept before (issue 42). The table is small (one row an address that failed
-- lately), so a plain index build holds its lock briefly.
CREATE INDEX signin_throttle_window ON signin_throttle (window_start);
