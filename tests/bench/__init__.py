"""Benchmarks (not timed tests): `make bench`."""
