"""Tests of the repository as a whole: the docs, README and examples run as written, the types,
the benchmarks' smoke runs and their bytecode."""
