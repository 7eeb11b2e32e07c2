"""The object stores, one module each, reached through `storage.backends` by URL scheme:
gs:// (`gcs`), s3:// and S3-compatible stores (`s3`, `s3_endpoint`)."""
