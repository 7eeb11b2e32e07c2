"""PyTorch on TPU: a training loop fed from `to_torch()` through torch_xla's `MpDeviceLoader`,
on XLA's CPU device (`PJRT_DEVICE=CPU`): several epochs, a checkpoint in the middle of one,
and a resume that trains on exactly the batches and reaches exactly the weights of the run
that was never stopped.

`MpDeviceLoader` takes batches ahead of the loop (a thread fills its queues), so the state
the loop saves must be the one taken right after the batch it trained on: each batch travels
with it (docs/coming-from/pytorch.md, "PyTorch on TPU"). The `.ci/xla.py` group runs this
file with torch 2.9 and torch_xla 2.9 from PyPI; the main suite has no torch_xla.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")  # before torch_xla is imported
torch = pytest.importorskip("torch")
pytest.importorskip("torch_xla", reason="torch_xla: the .ci/xla.py group (PyPI's 2.9 wheels)")
import torch_xla  # noqa: E402
from torch_xla.distributed.parallel_loader import MpDeviceLoader  # noqa: E402

import tpufeed  # noqa: E402

RECORDS, BATCH, EPOCHS = 96, 16, 3  # 6 steps an epoch
STOP = (1, 3)  # the checkpoint: after step 3 of the second epoch


class WithState(torch.utils.data.IterableDataset):
    """Each batch of `data` (a `to_torch()`) with the data state right after it."""

    def __init__(self, data):
        self.data = data

    def __iter__(self):
        batches = iter(self.data)  # one pass: the next epoch
        for batch in batches:
            yield batch, batches.get_state()


def dataset(workers: int) -> tpufeed.Dataset:
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(4, 8)).astype(np.float32)
    labels = rng.integers(0, 4, RECORDS)
    records = [
        {"x": centres[y] + rng.normal(scale=0.5, size=8).astype(np.float32), "y": y, "id": i}
        for i, y in enumerate(labels)
    ]

    def jitter(element, rng):  # depends only on (seed, epoch, record)
        noise = rng.normal(scale=0.1, size=8).astype(np.float32)
        return {**element, "x": element["x"] + noise}

    return (
        tpufeed.Dataset.from_sequence(records)
        .shuffle(seed=0)
        .random_map(jitter)
        .batch(BATCH, drop_remainder=True)
        .workers(workers)
    )


class Job:
    """A model, its optimizer and the data, on XLA's device; `train` records every step."""

    def __init__(self, workers: int):
        torch.manual_seed(0)
        self.device = torch_xla.device()
        self.model = torch.nn.Linear(8, 4).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.data = dataset(workers).to_torch()
        self.loader = MpDeviceLoader(
            torch.utils.data.DataLoader(WithState(self.data), batch_size=None), self.device
        )
        self.epoch, self.first_step, self.seen, self.saved = 0, 0, [], None

    def train(self, stop: tuple[int, int] | None = None) -> None:
        while self.epoch < EPOCHS:
            for step, (batch, state) in enumerate(self.loader, start=self.first_step):
                loss = torch.nn.functional.cross_entropy(self.model(batch["x"]), batch["y"])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                torch_xla.sync()
                self.seen.append((self.epoch, step, batch["id"].cpu().tolist()))
                if (self.epoch, step) == stop:
                    self.saved = self.checkpoint(step, state)
                    return  # preempted
            self.epoch, self.first_step = self.epoch + 1, 0

    def checkpoint(self, step: int, state: dict) -> dict:
        model = {k: v.cpu() for k, v in self.model.state_dict().items()}
        optimizer = self.optimizer.state_dict()
        for slot in optimizer["state"].values():
            slot["momentum_buffer"] = slot["momentum_buffer"].cpu()
        return {"model": model, "optimizer": optimizer, "data": state, "at": (self.epoch, step)}

    def restore(self, saved: dict) -> None:
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.data.set_state(saved["data"])  # the next pass goes on right after that batch
        self.epoch, step = saved["at"]
        self.first_step = step + 1

    def weights(self) -> list:
        return [p.detach().cpu() for p in self.model.parameters()]


@pytest.mark.parametrize("workers", [0, 2])
def test_mp_device_loader_trains_several_epochs_and_resumes_exactly_mid_epoch(tmp_path, workers):
    whole = Job(workers)
    whole.train()
    steps = RECORDS // BATCH
    assert [(e, s) for e, s, _ in whole.seen] == [
        (e, s) for e in range(EPOCHS) for s in range(steps)
    ]
    for epoch in range(EPOCHS):  # every record once an epoch, a new order each epoch
        ids = [i for e, _, batch in whole.seen if e == epoch for i in batch]
        assert sorted(ids) == list(range(RECORDS)), epoch
    assert len({tuple(b) for e, s, b in whole.seen if s == 0}) == EPOCHS

    stopped = Job(workers)
    stopped.train(stop=STOP)
    torch.save(stopped.saved, tmp_path / "checkpoint.pt")
    assert stopped.seen == whole.seen[: len(stopped.seen)]

    resumed = Job(workers)  # the restarted job
    resumed.restore(torch.load(tmp_path / "checkpoint.pt", weights_only=False))
    resumed.train()
    assert stopped.seen + resumed.seen == whole.seen  # the same batches, none again, none lost
    for a, b in zip(resumed.weights(), whole.weights(), strict=True):
        assert torch.equal(a, b)
