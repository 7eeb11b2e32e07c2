"""Tests of transforms/ (installed as tpufeed.transforms): decode, augment, tokenize and pack,
tf.Example parsing."""
