"""Tenants, partners, identities, addresses, domains and API keys."""
