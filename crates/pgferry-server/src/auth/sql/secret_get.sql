SELECT secret FROM pgferry.server_secrets WHERE name = $1
