"""A `--transform` file's text that changes the record count in every way the build must keep
exact and deterministic: it drops records, doubles others and draws from the per-record rng."""

EXPAND = '''
def expand(record, rng):
    """Drops every 7th record, doubles every 5th, and draws from the per-record rng."""
    if record["id"] % 7 == 3:
        return []
    out = dict(record, noise=float(rng.random()), copy=0)  # every record has every key
    return [out, dict(out, copy=1)] if record["id"] % 5 == 0 else [out]
'''
