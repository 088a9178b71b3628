"""envfleet-toy: a fast, deterministic, pure-numpy backend for tests, benchmarks and as the plugin authors' example."""

__version__ = "0.1.0"
