-- Segments left half-freed by a crash (see rotator.rs).
SELECT segment FROM pgferry.segments WHERE state = 'freeing' ORDER BY segment
