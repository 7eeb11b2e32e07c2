"""Side-by-side benchmarks of tpufeed against Grain, tf.data and PyTorch (`compare.py`)."""
