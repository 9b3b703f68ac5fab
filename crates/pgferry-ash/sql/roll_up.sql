SELECT pgferry_ash.roll_up() AS rows
