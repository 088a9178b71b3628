"""Test-only package: its plugin module fails to import, on purpose."""
