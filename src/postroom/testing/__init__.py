"""Test support shipped with the package: the pytest plugin and test-only job handlers."""
