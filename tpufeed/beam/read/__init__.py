"""Reading a build's inputs: the raw files, their blocks, the --transform functions, the
schema check, and bad records.
"""
