"""A hook whose name is misspelt (no final "s"), as a plugin author's typo would be."""

from envfleet.plugins import BackendSpec, hookimpl


@hookimpl
def envfleet_register_backend(registry):  # envfleet_register_backends, misspelt
    registry.register(BackendSpec(name="typo", env_factory="x:y", observation_spec=lambda cfg, n: {}))
