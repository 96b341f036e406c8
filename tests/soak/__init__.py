"""The soak run (`python -m tests.soak`, `make soak`): not collected by `make test`."""
