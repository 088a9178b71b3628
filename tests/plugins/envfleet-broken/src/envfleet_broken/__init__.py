"""Test-only package: plugin modules that fail to load, on purpose, each in its own way."""
