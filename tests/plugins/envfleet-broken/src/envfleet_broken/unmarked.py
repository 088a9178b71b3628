"""The right hook without the @hookimpl marker: pluggy does not see it."""

from envfleet.plugins import BackendSpec


def envfleet_register_backends(registry):
    registry.register(BackendSpec(name="unmarked", env_factory="x:y", observation_spec=lambda cfg, n: {}))
