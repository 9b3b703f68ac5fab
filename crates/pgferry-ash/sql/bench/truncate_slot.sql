SELECT pgferry_ash.truncate_slot($1::int)
