-- Connection slots left (superusers may use the reserved ones too).
SELECT current_setting('max_connections')::int - (SELECT count(*) FROM pg_stat_activity
                                                    WHERE backend_type = 'client backend')::int AS free
