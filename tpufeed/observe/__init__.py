"""What a pipeline lets its users see while it runs: counts, a timeline, profiler spans.

The lowest layer above `errors`: storage, ops and run all report into it, and it imports none
of them.

- `counts`: process-wide counters (cache hits, GCS retries, bytes read, ...). Workers ship
  their increments to the parent with each answer; `it.stats()` reports a run's share.
- `timeline`: a bounded ring of trace events, one track per process and thread, written as a
  Chrome / Perfetto trace-event file (`tpufeed.trace(path)`, `options(trace=path)`).
- `trace_file`: a timeline recorded into a file (`tpufeed.trace`, `options(trace=path)`).
- `profiler`: the parent's spans in the JAX and PyTorch profilers (`tpufeed/next`, ...),
  checked once per `next()`.
- `shipping`: what a worker sends of both with each answer, in one small blob.

Off (the default) every hook costs one attribute read.
"""
