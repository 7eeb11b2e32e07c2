"""Pre-train a tiny JAX language model on packed rows from a mixture of two local corpora.

The corpora ship with Python itself: source code (the top-level blocks of standard-library
modules) and prose (their docstrings), written once as ArrayRecord shards of
`{"text": ...}` records. The input pipeline:

    code, prose   each shuffled, decoded and tokenized (a byte tokenizer; any tokenizer works)
    Dataset.mix   70% code, 30% prose, in exact proportions
    .pack         rows of exactly --length tokens, with segment ids and positions
    .batch        [batch, length] on every step
    .to_jax       global arrays, two steps ahead

The model sees only its own segment: attention is causal and stays within a segment, and no
loss is taken across segment boundaries or on padding. The checkpoint holds the parameters and
`it.get_state()` (one cursor per corpus and the segments waiting in open rows, no tokens), so a
resumed run sees exactly the batches the first run would have seen next.

    python examples/lm_pretrain.py --steps 60 --checkpoint-at 30 --checkpoint /tmp/lm
    python examples/lm_pretrain.py --steps 60 --resume /tmp/lm
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sysconfig
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import tpufeed
from tpufeed.sources.array_record import write_array_records
from tpufeed.transforms import ByteTokenizer, Tokenize

MODULES = (
    "json",
    "email",
    "http",
    "urllib",
    "logging",
    "asyncio",
    "concurrent",
    "importlib",
    "xml",
    "unittest",
    "collections",
    "multiprocessing",
    "sqlite3",
    "zipfile",
)


def corpora(folder: Path) -> dict[str, list[str]]:
    """ArrayRecord shards of the code and prose corpora (written on the first run)."""
    out = {}
    for name in ("code", "prose"):
        paths = sorted(str(p) for p in folder.glob(f"{name}-*.array_record"))
        out[name] = paths
    if all(out.values()):
        return out
    folder.mkdir(parents=True, exist_ok=True)
    code, prose = [], []
    root = Path(sysconfig.get_paths()["stdlib"])
    for module in MODULES:
        for path in sorted((root / module).rglob("*.py")):
            if "test" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            code += [block for block in text.split("\n\n\n") if block.strip()]
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            prose += [
                doc
                for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module))
                and (doc := ast.get_docstring(node))
            ]
    for name, texts in (("code", code), ("prose", prose)):
        out[name] = []
        for shard in range(2):
            path = str(folder / f"{name}-{shard}.array_record")
            write_array_records(path, (tpufeed.codec.encode({"text": t}) for t in texts[shard::2]))
            out[name].append(path)
    return out


def corpus(paths: list[str], seed: int) -> tpufeed.Dataset:
    return (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(seed)
        .map(tpufeed.codec.decode)
        .map(Tokenize(ByteTokenizer(add_eos=True)))
    )


# -- the model: one causal self-attention layer over byte embeddings, within segments --------

VOCAB, WIDTH = ByteTokenizer.VOCAB_SIZE, 64


def init_params(key: jax.Array, length: int) -> dict:
    keys = jax.random.split(key, 6)
    normal = lambda k, shape: jax.random.normal(k, shape) * shape[0] ** -0.5  # noqa: E731
    return {
        "embed": normal(keys[0], (VOCAB, WIDTH)),
        "pos": normal(keys[1], (length, WIDTH)),
        "qkv": normal(keys[2], (WIDTH, 3 * WIDTH)),
        "out": normal(keys[3], (WIDTH, WIDTH)),
        "mlp": normal(keys[4], (WIDTH, 4 * WIDTH)),
        "mlp_out": normal(keys[5], (4 * WIDTH, WIDTH)),
    }


def logits_of(params: dict, batch: dict) -> jax.Array:
    tokens, segments = batch["tokens"], batch["tokens_segment_ids"]
    x = params["embed"][tokens] + params["pos"][batch["tokens_positions"]]
    q, k, v = jnp.split(x @ params["qkv"], 3, axis=-1)
    length = tokens.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, :, None] > 0)
    scores = jnp.where(causal & same, q @ k.transpose(0, 2, 1) / np.sqrt(WIDTH), -1e9)
    x = x + jax.nn.softmax(scores, axis=-1) @ v @ params["out"]
    x = x + jax.nn.gelu(x @ params["mlp"]) @ params["mlp_out"]
    return x @ params["embed"].T


def loss_of(params: dict, batch: dict) -> jax.Array:
    logp = jax.nn.log_softmax(logits_of(params, batch)[:, :-1])
    targets = batch["tokens"][:, 1:]
    segments = batch["tokens_segment_ids"]
    counted = (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)  # same segment
    picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return -jnp.sum(picked * counted) / jnp.maximum(counted.sum(), 1)


@jax.jit
def train_step(params: dict, batch: dict, lr: float = 0.5) -> tuple[dict, jax.Array]:
    loss, grads = jax.value_and_grad(loss_of)(params, batch)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def host(value: jax.Array) -> np.ndarray:
    return np.asarray(value.addressable_data(0))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=Path("tpufeed-lm"), help="folder for the corpora")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--length", type=int, default=128, help="tokens per packed row")
    p.add_argument("--batch-size", type=int, default=8, help="rows per step, per process")
    p.add_argument("--checkpoint", type=Path, default=None)
    p.add_argument("--checkpoint-at", type=int, default=0)
    p.add_argument("--resume", type=Path, default=None)
    args = p.parse_args(argv)

    paths = corpora(args.data)
    ds = (
        tpufeed.Dataset.mix(
            [corpus(paths["code"], 1), corpus(paths["prose"], 2)], weights=[0.7, 0.3], seed=0
        )
        .shard()
        .pack({"tokens": args.length}, open_rows=16)
        .batch(args.batch_size)
    )
    it = ds.to_jax(prefetch=2)
    replicated = NamedSharding(it.sharding.mesh, PartitionSpec())
    params, step = init_params(jax.random.key(0), args.length), 0
    if args.resume is not None:
        with np.load(args.resume / "params.npz") as f:
            params = {k: jnp.asarray(f[k]) for k in f.files}
        saved = json.loads((args.resume / "input_state.json").read_text())
        it.set_state(saved["input"])
        step = saved["step"]
    params = jax.device_put(params, replicated)

    started, tokens = time.perf_counter(), 0
    while step < args.steps:
        batch = next(it)
        params, loss = train_step(params, batch)
        tokens += int(host(jnp.sum(batch["tokens_segment_ids"] > 0)))
        step += 1
        if step % 20 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {float(host(loss)):.4f}", flush=True)
        if args.checkpoint is not None and step == args.checkpoint_at:
            args.checkpoint.mkdir(parents=True, exist_ok=True)
            np.savez(args.checkpoint / "params.npz", **{k: host(v) for k, v in params.items()})
            (args.checkpoint / "input_state.json").write_text(
                json.dumps({"step": step, "input": it.get_state()})
            )
            print(
                f"checkpoint at step {step} -> {args.checkpoint} "
                f"(input state {len(json.dumps(it.get_state()))} bytes)",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    stats = it.stats()
    it.close()
    checksum = float(sum(np.abs(host(v)).sum() for v in params.values()))
    shares = ", ".join(f"{c['share']:.1%}" for c in stats.mixture or [])
    print(
        f"steps {step}  real tokens/s {tokens / elapsed:,.0f}  rows full {stats.pack_fill:.1%}  "
        f"mixture {shares}  input wait {it.wait_fraction:.1%}",
        flush=True,
    )
    print(f"loss {float(host(loss)):.4f}  params checksum {checksum:.6f}", flush=True)
    return {"step": step, "checksum": checksum, "loss": float(host(loss))}


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
