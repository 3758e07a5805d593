"""Tests of tenants, identities, addresses, API keys and the first-start bootstrap."""
