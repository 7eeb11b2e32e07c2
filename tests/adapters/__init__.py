"""Tests of tpufeed/adapters/: to_jax, to_tf, to_torch and Keras, with the real frameworks."""
