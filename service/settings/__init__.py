"""The sections of the service's configuration, one concern a module; service/config.py
composes them into the one frozen Config. Modules: docs/architecture.md."""
