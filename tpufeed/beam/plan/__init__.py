"""The plan of a build, made before Beam runs: what it builds (`BuildConfig`), its inputs'
blocks and shard count, and which options go to Beam.
"""
