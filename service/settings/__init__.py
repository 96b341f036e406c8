"""The sections of the service's configuration, one concern a module; service/config.py
composes them into the one frozen Config.

    reading.py   one setting: its variable read, converted, checked (ConfigError names it)
    limits.py    request and rate limits, load shedding, slow clients
    oauth.py     registration bounds, trusted proxies, the sign-in throttle
    audit.py     the audit trail's sink and queue
    redis.py     the limiter's Redis: URL, key prefix, engine
"""
