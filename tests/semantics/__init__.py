"""The meaning-level tests (DESIGN.md "Semantics that must hold"): exactly once, deterministic,
per-record randomness, exact and elastic resume, states of the previous release, real multi-host
runs, fuzzing; and the restore-at-every-step check over every stage."""
