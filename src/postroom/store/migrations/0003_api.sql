-- 0003_api: what the REST API v1 needs beyond 0.2.0.
--
-- * A domain's DKIM key pair, generated when a tenant adds the domain (POST /v1/domains)
--   so that the DNS records to publish can be shown at once and outbound mail can be
--   signed later: the selector (the DKIM s= tag, e.g. pr1), the private key sealed under
--   the master key (PKCS#8 PEM in the pr1 envelope, associated data
--   pr1|domains|dkim_private_sealed|{domain id}) and the public key as the base64 DER
--   SubjectPublicKeyInfo that is the p= of the DKIM TXT record. NULL for the platform
--   domain and for domains written before this version.
-- Nothing existing changes.

ALTER TABLE domains ADD COLUMN dkim_selector TEXT;
ALTER TABLE domains ADD COLUMN dkim_private_sealed TEXT;
ALTER TABLE domains ADD COLUMN dkim_public TEXT;
