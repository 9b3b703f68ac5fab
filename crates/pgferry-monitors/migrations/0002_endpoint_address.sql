-- Inbound webhook slugs are per tenant (ADR 0021). Before, `slug` was global and was the
-- public address `/in/{slug}`, so creating a slug another tenant held answered 409 and told
-- the caller it existed. Now each endpoint has a server-generated public address
-- (`{slug}-{128 random bits, hex}`), unique over all tenants; the slug is unique only
-- within its tenant. Existing endpoints keep their address (their slug), so URLs that
-- providers already post to keep working.
ALTER TABLE pgferry_mon.endpoints ADD COLUMN address text;
UPDATE pgferry_mon.endpoints SET address = slug WHERE address IS NULL;
ALTER TABLE pgferry_mon.endpoints ALTER COLUMN address SET NOT NULL;
ALTER TABLE pgferry_mon.endpoints ADD CONSTRAINT endpoints_address_key UNIQUE (address);
ALTER TABLE pgferry_mon.endpoints DROP CONSTRAINT endpoints_slug_key;
ALTER TABLE pgferry_mon.endpoints ADD CONSTRAINT endpoints_tenant_slug_key UNIQUE (tenant_id, slug);
-- The unique (tenant_id, slug) index serves what this one did.
DROP INDEX pgferry_mon.endpoints_tenant;
