"""Postroom: a self-hosted email platform for applications and AI agents."""

__version__ = "0.4.0"
