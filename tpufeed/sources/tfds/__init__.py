"""TFDS-prepared datasets read in place: the metadata that finds their files, TFDS's split
strings, and decoding with the dataset's own features (`Dataset.from_tfds`)."""
