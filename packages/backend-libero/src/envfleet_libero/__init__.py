"""envfleet-libero: the LIBERO benchmark as an envfleet backend."""

__version__ = "0.1.0"
