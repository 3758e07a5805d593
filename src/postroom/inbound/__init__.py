"""Inbound mail: SMTP, routing, staging, ingestion and import."""
