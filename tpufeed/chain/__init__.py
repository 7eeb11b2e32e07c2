"""The chainable methods of `tpufeed.Dataset`, grouped by what they set.

`Dataset` (tpufeed/dataset.py) is the public front: its fields, iteration, adapters and plans.
It inherits the methods that make a new pipeline from an old one from the mixins here, as it
inherits its `from_*` constructors from `tpufeed.sources.constructors`:

- `base.py`: what every mixin reads of a pipeline, and how it makes the next one;
- `order.py`: which records each epoch reads, in what order, on which host: `shuffle`,
  `shard`, `repeat`;
- `stages.py`: what happens to the elements: `map`, `random_map`, `filter`, `flat_map`,
  `cache`, `pack`, `batch`;
- `settings.py`: where and how the pipeline runs: `workers`, `prefetch`, `options`,
  `ignore_errors`.
"""
