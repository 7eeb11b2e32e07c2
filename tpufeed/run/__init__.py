"""Executing a plan: which chunks to read, where they run, and what the consumer receives.

`plan` (the runnable form of a pipeline), `walk` (the chunks of a host's stream), `chunks` (a
chunk read and run through the record stages), `stream` (pieces in order in, items and exact
cursors out), the executors that decide where chunks run (`local`, `workers/`, `mixture`),
`resume` (a saved state to a start), `pipeline_run` (one run of a plan from a start),
`iterator` (what users hold), `hosts/` (the hosts of a multi-host run: their agreement,
heartbeats, hosts that end together), `autotune`, `watch` (timeouts that name where a pipeline
is stuck), `stats` and `prefetch`.
"""
