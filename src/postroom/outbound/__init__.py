"""Outbound mail: composition, the outbox with stages, transports, bounces, limits."""
