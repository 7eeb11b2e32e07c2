"""Train a small PyTorch classifier from a tpufeed pipeline through `Dataset.to_torch()`.

torchdata's `StatefulDataLoader(..., batch_size=None)`: tpufeed batches already. With
`--workers W` DataLoader worker w makes batches w, w+W, ... of the same stream, so the loop
receives the batches of `--workers 0`. The loader's `state_dict()` is exactly what the loop
received (whatever the workers made ahead), and is saved next to the model's.

    python examples/torch_train.py --epochs 5 --workers 2 --checkpoint-at 40 --checkpoint /tmp/torch-ckpt
    python examples/torch_train.py --epochs 5 --workers 2 --resume /tmp/torch-ckpt
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import tpufeed
from tpufeed.cli.quickstart import build


def augment(element: dict, rng: np.random.Generator) -> dict:
    """Shift the digit by up to one pixel; the shift depends only on (seed, epoch, record)."""
    dy, dx = rng.integers(-1, 2, size=2)
    image = np.roll(element["image"], (int(dy), int(dx)), axis=(0, 1))
    return {
        "image": image.astype(np.float32).reshape(64) / 255.0,
        "label": element["label"],
        "id": np.int64(element["id"]),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="tpufeed-quickstart", help="folder for the digits shards")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint file to write")
    p.add_argument("--checkpoint-at", type=int, default=0, help="step at which to write it")
    p.add_argument("--resume", type=Path, default=None, help="checkpoint file to resume from")
    args = p.parse_args(argv)

    paths, test = build(Path(args.data))
    # This host's share: torch.distributed's rank when it runs (`.shard()` alone would ask jax).
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    rank, world = (
        (torch.distributed.get_rank(), torch.distributed.get_world_size())
        if distributed
        else (0, 1)
    )
    ds = (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(seed=0)
        .shard(rank, world)
        .map(tpufeed.codec.decode)
        .random_map(augment)
        .batch(args.batch_size)
        .repeat(args.epochs)
    )
    loader = StatefulDataLoader(ds.to_torch(), batch_size=None, num_workers=args.workers)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    step = 0
    if args.resume is not None:
        saved = torch.load(args.resume)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["input"])  # restored with the same --workers
        step = saved["step"]

    seen: list[int] = []
    for batch in loader:
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += batch["id"].tolist()
        step += 1
        if args.checkpoint is not None and step == args.checkpoint_at:
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "input": loader.state_dict(),
                    "step": step,
                },
                args.checkpoint,
            )
            print(f"checkpoint at step {step} -> {args.checkpoint}", flush=True)

    with torch.no_grad():
        images = torch.from_numpy(
            test["image"].reshape(len(test["image"]), 64).astype(np.float32) / 255.0
        )
        accuracy = (model(images).argmax(dim=1).numpy() == test["label"]).mean()
    times_seen = set(Counter(seen).values())
    exactly_once = times_seen == {args.epochs} and len(set(seen)) == len(ds.source)
    print(
        f"steps {step}  records {len(seen)}  every record once per epoch "
        f"{exactly_once if args.resume is None else '(resumed run)'}  "
        f"test accuracy {accuracy:.3f}  final loss {loss.item():.6f}"
        + (f"  input wait {loader.dataset.wait_fraction:.1%}" if args.workers == 0 else ""),
        flush=True,
    )
    return {
        "step": step,
        "records": len(seen),
        "exactly_once": exactly_once,
        "accuracy": float(accuracy),
        "final_loss": loss.item(),
    }


if __name__ == "__main__":
    main()
