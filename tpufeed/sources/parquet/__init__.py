"""Parquet files: the source and one file's reader (`source`), and the decoded row groups each
process keeps (`_row_groups`)."""
