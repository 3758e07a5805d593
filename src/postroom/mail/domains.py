"""Organisational domains (the registrable domain under the Public Suffix List).

``mail.example.co.uk`` → ``example.co.uk``. Used for a message's ``sender_domain`` and a
verification code's sender. The list ships with the ``publicsuffixlist`` package, so
nothing is fetched at run time. Private suffixes (``github.io``) count, as DMARC does.
"""

from __future__ import annotations

from functools import lru_cache

from publicsuffixlist import PublicSuffixList

_PSL = PublicSuffixList()


@lru_cache(maxsize=4096)
def organizational_domain(domain: str) -> str:
    """The registrable domain, or the domain itself when it has none (``localhost``)."""
    domain = domain.strip().rstrip(".").lower()
    if not domain:
        return ""
    found = _PSL.privatesuffix(domain)
    return found if found else domain
