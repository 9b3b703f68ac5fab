-- First server to start stores its random secret; every server then reads the same one.
-- $1 name, $2 candidate secret.
INSERT INTO pgferry.server_secrets (name, secret) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING
