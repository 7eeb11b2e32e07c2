"""Which record goes where, as pure arithmetic: no I/O, no mutable state.

`permutation` (each epoch's order of records), `sharding` (this host's share), `cursor` (where
a host stands), `elastic` (a stop continued on another host count), `schedule` (a mixture's
exact interleaving), `rng` (each record's random numbers) and `state` (a position written
down, and read back).
"""
