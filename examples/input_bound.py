"""Is this job input-bound? One JAX training loop, seen three ways: its profile, tpufeed's
timeline of every process, and the live metrics.

The pipeline decodes with a deliberately slow transform (about `--decode-ms` of CPU a record)
in two worker processes, and the training step is a small jitted MLP. The script prints the
share of the loop spent waiting for input, as each of the three sources tells it; with
`--picture out.png` it draws the timeline (what docs/input-bound.md shows).

    python examples/input_bound.py --steps 60
    python examples/input_bound.py --picture docs/images/input-bound-timeline.png
"""

from __future__ import annotations

import argparse
import glob
import json
import tempfile
import time
import urllib.request
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import tpufeed

BATCH = 32


def make_dataset(decode_ms: float) -> tpufeed.Dataset:
    def decode(i: int) -> dict:  # stands in for a JPEG decode: burns CPU, then makes the pixels
        deadline = time.perf_counter() + decode_ms / 1000
        while time.perf_counter() < deadline:
            pass
        return {"x": np.full(64, i % 7, np.float32), "y": np.int32(i % 10)}

    records = tpufeed.Dataset.from_sequence(range(1 << 20))
    return records.shuffle(seed=0).map(decode).batch(BATCH, drop_remainder=True).workers(2)


@jax.jit
def train_step(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss(w: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(jnp.tanh(x @ w[0]) @ w[1])
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    return w - 0.01 * jax.grad(loss)(w)


def replicated(array: jax.Array) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(array.sharding.mesh, jax.sharding.PartitionSpec())


def run(args: argparse.Namespace, out: Path) -> dict:
    """Trains `args.steps` steps under the profiler, a timeline and a metrics server."""
    server = tpufeed.serve_metrics(port=0)
    w = None
    with tpufeed.trace(out / "timeline.json"), jax.profiler.trace(str(out / "profile")):
        it = iter(make_dataset(args.decode_ms).to_jax(prefetch=2))
        started = time.perf_counter()
        for step in range(args.steps):  # XProf's step markers: its step-time breakdown reads them
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                batch = next(it)
                if w is None:  # replicated over the batches' mesh: the step compiles once
                    w = jax.device_put(jnp.zeros((2, 64, 64)), replicated(batch["x"]))
                w = train_step(w, batch["x"], batch["y"]).block_until_ready()
        wall = time.perf_counter() - started
        metrics = urllib.request.urlopen(server.url, timeout=10).read()
        it.close()
    server.close()
    return {"wall": wall, "wait_fraction": it.wait_fraction, "metrics": metrics.decode()}


def profile_wait(profile_dir: Path) -> tuple[float, float]:
    """Seconds of the `train` steps, and of the `tpufeed/next` waits inside them, on the loop's
    thread of the profile JAX wrote (what XProf's trace viewer shows). From the third step on,
    as `wait_fraction` counts: the first two hold the start-up and the step's compilation."""
    from jax.profiler import ProfileData

    (path,) = glob.glob(f"{profile_dir}/**/*.xplane.pb", recursive=True)
    plane = ProfileData.from_file(path).find_plane_with_name("/host:CPU")
    (loop,) = [line for line in plane.lines if any(e.name == "train" for e in line.events)]
    steps = [(e.start_ns, e.end_ns) for e in loop.events if e.name == "train"][2:]
    waits = [
        e.duration_ns
        for e in loop.events
        if e.name == "tpufeed/next" and any(a <= e.start_ns <= b for a, b in steps)
    ]
    return sum(b - a for a, b in steps) / 1e9, sum(waits) / 1e9


def metric(text: str, name: str) -> float:
    """A sample's value in Prometheus's text format."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise KeyError(name)


def draw(timeline: Path, picture: Path, seconds: float = 0.3) -> None:
    """The timeline's tracks as rows of spans, over `seconds` from the middle of the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.loads(timeline.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    spans = [e for e in events if e["ph"] == "X"]
    middle = (min(e["ts"] for e in spans) + max(e["ts"] + e["dur"] for e in spans)) / 2
    window = [e for e in spans if middle <= e["ts"] < middle + seconds * 1e6]
    tracks = sorted({(e["pid"], e["tid"]) for e in window}, key=lambda t: (names[t[0]], t[1]))
    kinds = sorted({e["name"] for e in window} - {"chunk"})
    colours = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(tracks) + 1.2))
    for row, track in enumerate(tracks):
        for e in (e for e in window if (e["pid"], e["tid"]) == track):
            start, length = (e["ts"] - middle) / 1000, e["dur"] / 1000
            if e["name"] == "chunk":  # a worker's task: a thin bar under its stages
                ax.broken_barh([(start, length)], (row - 0.45, 0.1), color="black")
            else:
                ax.broken_barh([(start, length)], (row - 0.3, 0.7), color=colours[e["name"]])
    ax.set_yticks(range(len(tracks)), [f"{names[t[0]]}: {threads[t]}" for t in tracks])
    ax.set_xlabel("ms (black underline: a worker's chunk)")
    ax.legend(
        handles=[plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds],
        labels=kinds,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncol=len(kinds),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(f"tpufeed's timeline: {seconds:g} s of an input-bound loop")
    fig.savefig(picture, dpi=110, bbox_inches="tight")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--decode-ms", type=float, default=0.5, help="CPU per record, in ms")
    p.add_argument("--picture", type=Path, help="draw the timeline into this PNG")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="input-bound-"))
    seen = run(args, out)
    stepped, waited = profile_wait(out / "profile")
    scraped = metric(seen["metrics"], "tpufeed_next_wait_seconds_sum")
    print(f"steps {args.steps} in {seen['wall']:.2f} s")
    print(f"to_jax wait_fraction {seen['wait_fraction']:.2f}")
    print(f"profile tpufeed/next {waited / stepped:.2f} of the train steps' {stepped:.2f} s")
    print(f"metrics tpufeed_next_wait_seconds_sum {scraped:.2f}")
    print(f"timeline {out / 'timeline.json'}")
    if args.picture:
        args.picture.parent.mkdir(parents=True, exist_ok=True)
        draw(out / "timeline.json", args.picture)
        print(f"picture {args.picture}")


if __name__ == "__main__":
    main()
