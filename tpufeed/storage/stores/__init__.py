"""The object stores, one module each, reached through `storage.backends` by URL scheme: gs://
(`gcs`), s3:// and S3-compatible stores (`s3`, `s3_endpoint`), files on web servers over
https:// and http:// (`web`, its requests in `http_client`), and the Hugging Face Hub's
hf://datasets/... (`hub`)."""
