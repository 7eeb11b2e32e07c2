"""What each stage does to elements, one stage a file.

`base` holds the contract every stage implements and the types stages and executors share
(`Chunk`, `Piece`, `EpochEnd`, `Item`, `Counters`); `registry` knows every stage and where it
may stand. The record stages (`map`, `filter`, `flat_map`) and the stream stages (`batch`,
`pack`, `mix`) build on pure cores: `stacking` (whole batches of arrays), `padding` and
`first_fit` (rows of packed sequences).
"""
