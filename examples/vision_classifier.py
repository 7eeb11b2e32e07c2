"""Train a small JAX image classifier on a `tpufeed build` image folder with the ImageNet recipe.

Training: RandomResizedCrop (area 8-100%, aspect 3/4-4/3), flip, colour jitter, normalise;
evaluation: ResizedCenterCrop (the central 224/256, resized). The crops decode only what they
need from the JPEG bytes in the shards (at reduced DCT scale for these small outputs).

The images are real photographs that ship with scikit-learn and matplotlib (a temple, a
flower, Grace Hopper): each class is many distinct crops of one of them, saved as small JPEGs
in class sub-folders. `tpufeed build` turns the folder into shards with `image` (the JPEG
bytes), `path`, `label` and `class_name`; every fourth image of a class is held out for
evaluation.

    python examples/vision_classifier.py --data /tmp/vision --steps 60
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import tpufeed
from tpufeed.transforms import (
    ColorJitter,
    Normalize,
    RandomFlip,
    RandomResizedCrop,
    ResizedCenterCrop,
    Select,
)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLASSES = {
    "temple": ("sklearn", "china.jpg"),
    "flower": ("sklearn", "flower.jpg"),
    "portrait": ("matplotlib", "grace_hopper.jpg"),
}


def photograph(package: str, name: str) -> str:
    """The photo's path inside the installed package (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed: pip install scikit-learn matplotlib")
    folder = "datasets/images" if package == "sklearn" else "mpl-data/sample_data"
    return os.path.join(list(spec.submodule_search_locations)[0], folder, name)


def write_image_folder(folder: Path, per_class: int, seed: int) -> None:
    """`per_class` JPEGs (quality 90, 96x72) per class: random 35-70% windows of its photo."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for class_name, (package, name) in CLASSES.items():
        photo = Image.open(photograph(package, name)).convert("RGB")
        width, height = photo.size
        (folder / class_name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w = rng.uniform(0.35, 0.7) * min(width, height * 4 / 3)
            left, top = rng.uniform(0, width - w), rng.uniform(0, height - w * 3 / 4)
            image = photo.resize(
                (96, 72), Image.Resampling.BILINEAR, box=(left, top, left + w, top + w * 3 / 4)
            )
            buf = io.BytesIO()
            image.save(buf, format="JPEG", quality=90)
            (folder / class_name / f"{i:04d}.jpg").write_bytes(buf.getvalue())


def build(data: Path, per_class: int) -> Path:
    """The image folder, built into shards with `tpufeed build` (once)."""
    out = data / "shards"
    if not (out / "manifest.json").exists():
        write_image_folder(data / "images", per_class, seed=0)
        # The same as `tpufeed build --input DATA/images --output DATA/shards --num-shards 2`.
        from tpufeed.beam import BuildConfig
        from tpufeed.beam import build as build_shards

        build_shards(BuildConfig(inputs=(str(data / "images"),), output=str(out), num_shards=2))
    return out


def held_out(element: dict) -> bool:
    """Every fourth image of each class is for evaluation (the file name is its number)."""
    return int(element["path"].rsplit("/", 1)[1].split(".")[0]) % 4 == 0


def init_params(key: jax.Array, classes: int) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "c1": jax.random.normal(k1, (3, 3, 3, 16)) * (2 / 27) ** 0.5,
        "b1": jnp.zeros(16),
        "c2": jax.random.normal(k2, (3, 3, 16, 32)) * (2 / 144) ** 0.5,
        "b2": jnp.zeros(32),
        "w": jax.random.normal(k3, (32, classes)) * 0.1,
        "b": jnp.zeros(classes),
    }


def logits_of(params: dict, images: jax.Array) -> jax.Array:
    """Two strided 3x3 convolutions, global average pooling, a linear layer."""
    conv = lambda x, w: jax.lax.conv_general_dilated(  # noqa: E731
        x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    hidden = jax.nn.relu(conv(images, params["c1"]) + params["b1"])
    hidden = jax.nn.relu(conv(hidden, params["c2"]) + params["b2"])
    return hidden.mean(axis=(1, 2)) @ params["w"] + params["b"]


def loss_of(params: dict, batch: dict) -> jax.Array:
    logp = jax.nn.log_softmax(logits_of(params, batch["image"]))
    return -jnp.mean(jnp.take_along_axis(logp, batch["label"][:, None], axis=1))


@jax.jit
def train_step(params: dict, velocity: dict, batch: dict) -> tuple[dict, dict, jax.Array]:
    loss, grads = jax.value_and_grad(loss_of)(params, batch)
    velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
    return jax.tree.map(lambda p, v: p - 0.05 * v, params, velocity), velocity, loss


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=Path("tpufeed-vision"), help="working folder")
    p.add_argument("--per-class", type=int, default=64, help="images per class (1/4 held out)")
    p.add_argument("--size", type=int, default=32, help="crop size fed to the model")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0, help="tpufeed worker processes")
    args = p.parse_args(argv)

    shards = build(args.data, args.per_class)
    keep = Select(("image", "label"))
    train = (
        tpufeed.Dataset.open(shards)
        .filter(lambda e: not held_out(e))
        .shuffle(seed=0)
        .random_map(RandomResizedCrop(args.size))
        .random_map(RandomFlip())
        .random_map(ColorJitter(0.3, 0.3, 0.3))
        .map(Normalize(MEAN, STD))
        .map(keep)
        .batch(args.batch_size, drop_remainder=True)
        .repeat()
        .workers(args.workers)
    )
    evaluate = (
        tpufeed.Dataset.open(shards)
        .filter(held_out)
        .map(ResizedCenterCrop(args.size))
        .map(Normalize(MEAN, STD))
        .map(keep)
        .batch(64)
    )

    params = init_params(jax.random.key(0), len(CLASSES))
    velocity = jax.tree.map(jnp.zeros_like, params)
    it = train.to_jax(prefetch=2)
    started = time.perf_counter()
    losses = []
    for step in range(1, args.steps + 1):
        params, velocity, loss = train_step(params, velocity, next(it))
        losses.append(float(loss))
        if step % 20 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    it.close()
    elapsed = time.perf_counter() - started
    correct = total = 0
    for batch in evaluate:
        predicted = np.asarray(jnp.argmax(logits_of(params, jnp.asarray(batch["image"])), axis=1))
        correct += int((predicted == batch["label"]).sum())
        total += len(batch["label"])
    accuracy = correct / total
    print(
        f"steps {args.steps}  first-loss {losses[0]:.4f}  last-loss {np.mean(losses[-10:]):.4f}  "
        f"eval-images {total}  accuracy {accuracy:.3f}  train-seconds {elapsed:.1f}  "
        f"input-wait {it.wait_fraction:.1%}",
        flush=True,
    )
    return {"accuracy": accuracy, "losses": losses}


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
