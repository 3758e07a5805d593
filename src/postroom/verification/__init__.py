"""Verification codes and links for agents: waiting for the next one, listing recent ones.

Ingestion finds the codes and links of each message (:mod:`postroom.mail.codes`) and
stores them in ``verifications``; :mod:`postroom.verification.wait` hands them out to a
waiting client and :mod:`postroom.verification.recent` lists them.
"""
