"""The local worker processes of `tpufeed build --workers N`: how many, started before Beam
is imported, checked before a portable runner's build, and their entry point.
"""
