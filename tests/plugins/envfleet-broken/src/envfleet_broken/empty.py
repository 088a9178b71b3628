"""A marked hook that registers nothing (a forgotten registry.register call)."""

from envfleet.plugins import hookimpl


@hookimpl
def envfleet_register_backends(registry):
    pass
