SELECT to_regclass('pgferry.schema_migrations') IS NOT NULL AS migrations,
       to_regclass('pgferry.schema_functions') IS NOT NULL AS functions
