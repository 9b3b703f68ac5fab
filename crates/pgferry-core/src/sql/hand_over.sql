-- Hand the open, long-leased attempts of a sealed segment over to long_leases (ADR 0008);
-- see pgferry.hand_over() in sql/functions/hand_over.sql. $1 segment
SELECT pgferry.hand_over($1) AS handed
