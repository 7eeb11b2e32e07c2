"""Keras: `model.fit` resumed after an interruption continues the data at the right step.

Keras' `BackupAndRestore` saves the model, the optimizer and the epoch; a restarted `fit`
begins that epoch again at its first step with a fresh data iterator, so the data position is
lost. `BackupAndRestore(tf_ds, backup_dir)` here is Keras' callback plus the data:

- each backup first writes the exact state after the batches the trained steps consumed
  (`tpufeed_data.json` in `backup_dir`, keyed by the optimizer's step count; the last three),
  counted from `on_train_batch_end`, so batches TensorFlow took ahead do not count;
- on restart, after Keras loads the weights, it takes the data state of the restored step and
  sets it on `tf_ds`: the first epoch of this `fit` starts there;
- a backup taken mid-epoch (`save_freq=N`) would make Keras run that epoch again in full;
  the callback ends it where the uninterrupted epoch would have ended (it sets
  `model.stop_training` at that step and clears it in `on_epoch_end`). This needs
  `fit(steps_per_epoch=...)`, and `save_freq=N` without it is refused: Keras would take every
  later epoch's length from the shortened one. It also needs the whole fit in one pass of the
  dataset (`.repeat(n)` with enough epochs, or `.repeat()`), else it is refused: Keras counts
  a pass's batches from the start of each `fit`, so a pass resumed mid-way would end early.
- each Keras epoch that starts a pass (every one without `steps_per_epoch`) gets the
  pipeline's next epochs (`adapters/_tf_passes.py`); the backup saves where the next pass
  starts, so `save_freq="epoch"` resumes exactly there.

Batches trained on after the restart are those the uninterrupted `fit` would have trained
on. Use it in place of `keras.callbacks.BackupAndRestore`, on a dataset from `Dataset.to_tf()`
that `fit` iterates itself (no `.map`/`.prefetch` added on the TensorFlow side is needed).

>>> backup = tpufeed.adapters.keras.BackupAndRestore(train, "/tmp/backup", save_freq=100)  # doctest: +SKIP
>>> model.fit(train, epochs=10, steps_per_epoch=500, callbacks=[backup])                   # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

from tpufeed.adapters._tensorflow import import_tensorflow
from tpufeed.errors import InvalidArgumentError, StateError

tf = import_tensorflow()  # Keras 3 comes with every TensorFlow from the floor on
import keras  # noqa: E402

__all__ = ["DATA_FILE", "BackupAndRestore"]

DATA_FILE = "tpufeed_data.json"
_KEPT = 3  # records: the latest backup's, and the ones `double_checkpoint` can fall back to


class _EndOfResumedEpoch:
    """`model.stop_training` while a resumed epoch ends early; truthy, and told apart from a
    `True` that another callback (EarlyStopping) sets."""


_END_OF_EPOCH = _EndOfResumedEpoch()


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras' `BackupAndRestore` that also saves and restores the position of `dataset` (a
    `Dataset.to_tf()` dataset), so a resumed `fit` trains on exactly the batches it would
    have trained on."""

    def __init__(
        self,
        dataset: Any,
        backup_dir: str,
        save_freq: str | int = "epoch",
        double_checkpoint: bool = False,
        delete_checkpoint: bool = True,
    ):
        tracker = getattr(dataset, "tpufeed", None)
        if tracker is None or not hasattr(tracker, "state_after"):
            raise InvalidArgumentError(
                f"BackupAndRestore takes the dataset that Dataset.to_tf() "
                f"returned, not {type(dataset).__name__}"
            )
        super().__init__(
            backup_dir,
            save_freq=save_freq,
            double_checkpoint=double_checkpoint,
            delete_checkpoint=delete_checkpoint,
        )
        self._input = tracker
        self._data_path = f"{backup_dir.rstrip('/')}/{DATA_FILE}"
        self._restored: dict[str, Any] | None = None
        self._pass: int | None = None  # the dataset pass this fit's steps are consuming
        self._pass_batches = 0  # batches of that pass the finished steps consumed
        self._epoch_steps = 0  # steps of the current epoch done, before a restart included
        self._first_step = 0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.save_freq != "epoch" and not self.params.get("steps"):
            raise InvalidArgumentError(
                f"BackupAndRestore(save_freq={self.save_freq!r}) backs up mid-epoch, which needs "
                f"fit(steps_per_epoch=...) here: without it Keras takes the length of every "
                f"epoch from the first one it runs, which after a restart mid-epoch is only the "
                f"rest of that epoch. Pass steps_per_epoch, or back up with save_freq='epoch'"
            )
        self._check_one_pass()
        early = self._start_early()
        super().on_train_begin(logs)  # weights, optimizer and epoch, if a backup is there
        self._pass, self._pass_batches, self._epoch_steps = None, 0, 0
        self._restored = None
        if not tf.io.gfile.exists(self._weights_path):
            return
        step = self._step()
        records = self._records()
        match = [r for r in records if r["step"] == step]
        if match and early is not None and match[-1]["step"] == early["step"]:
            match[-1] = early  # its data state is set already, its first batches begun
        if not match:
            held = (
                f"holds data states for steps {[r['step'] for r in records]} only"
                if records
                else "does not exist: keras.callbacks.BackupAndRestore, which does not save "
                "the data position, probably wrote this backup"
            )
            raise StateError(
                f"BackupAndRestore: the backup in {self.backup_dir} restored the "
                f"model at optimizer step {step}, but {self._data_path} {held}; "
                f"resuming would train on other batches. Delete the backup to "
                f"start afresh"
            )
        if match[-1] is not early and match[-1]["data"] is not None:
            self._input.set_state(match[-1]["data"])  # replaces (and stops) the early start
        self._restored = match[-1]
        self._epoch_steps = self._restored["epoch_steps"]
        self.model._initial_epoch = self._restored[
            "epoch"
        ]  # Keras' own field, as its parent sets it

    def _start_early(self) -> dict[str, Any] | None:
        """Before Keras restores the model: the latest backup's data state set and its first
        batches begun (`TfInput.start`), so they are made while the weights load. That is the
        backup Keras restores unless the process died between the two writes; then the
        restored step's own state replaces it. The record used, or None (no backup)."""
        if not tf.io.gfile.exists(self._weights_path):
            return None
        records = [r for r in self._records() if r["data"] is not None]
        if not records:
            return None
        self._input.set_state(records[-1]["data"])
        self._input.start()
        return records[-1]

    def _check_one_pass(self) -> None:
        """Mid-epoch backups need the whole fit in one pass: Keras counts a pass's batches
        from the start of each fit, so one resumed mid-pass would end early."""
        steps, epochs, length = self.params.get("steps"), self.params.get("epochs"), None
        if self.save_freq != "epoch" and steps and epochs:
            length = self._input.cardinality
        if length is not None and 0 <= length < steps * epochs:
            raise InvalidArgumentError(
                f"BackupAndRestore(save_freq={self.save_freq!r}) resumes mid-epoch, which needs "
                f"one pass of the dataset to last the whole fit: a pass has {length} batches, "
                f"and fit runs {epochs} epochs of {steps} steps. Give the pipeline epochs for "
                f"{steps * epochs} batches with .repeat(n) (or .repeat()), or back up with "
                "save_freq='epoch'"
            )

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._current_epoch = epoch  # Keras only sets it at an epoch's end: wrong after a restart

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._first_step = batch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        steps = batch - self._first_step + 1  # more than one with steps_per_execution
        if self._input.passes != self._pass:
            self._pass, self._pass_batches = self._input.passes, 0
        self._pass_batches += steps
        self._epoch_steps += steps
        per_epoch = self.params.get("steps")
        if (
            per_epoch
            and self._epoch_steps >= per_epoch
            and batch + 1 < per_epoch
            and not self.model.stop_training
        ):
            self.model.stop_training = _END_OF_EPOCH
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_steps = 0
        super().on_epoch_end(epoch, logs)
        if self.model.stop_training is _END_OF_EPOCH:
            self.model.stop_training = False

    def _save_model(self) -> None:
        """The data state first, then Keras' weights and epoch: a backup's step always has
        its data state, even when the process dies between the two."""
        record = {
            "step": self._step(),
            "epoch": self._current_epoch,
            "epoch_steps": self._epoch_steps,
            "data": self._data_state(),
        }
        records = [r for r in self._records() if r["step"] != record["step"]]
        tf.io.gfile.makedirs(self.backup_dir)
        temporary = f"{self._data_path}.tmp"
        with tf.io.gfile.GFile(temporary, "w") as f:
            f.write(json.dumps([*records, record][-_KEPT:]))
        tf.io.gfile.rename(temporary, self._data_path, overwrite=True)
        super()._save_model()

    def _data_state(self) -> dict[str, Any]:
        """After the batches consumed so far (each pass is the pipeline's next epochs)."""
        if self._pass is None:  # no step yet in this fit: where its first pass starts
            return self._input.next_state()
        if self._pass != self._input.passes:
            return self._input.state_after(0)  # a new pass has begun, none of it trained on
        if self._input.ends_after(self._pass_batches):
            return self._input.next_state()  # the pass is over: where the next one starts
        return self._input.state_after(self._pass_batches)

    def _records(self) -> list[dict[str, Any]]:
        if not tf.io.gfile.exists(self._data_path):
            return []
        with tf.io.gfile.GFile(self._data_path, "r") as f:
            text = f.read()
        try:
            records = json.loads(text)
        except ValueError as e:
            raise StateError(f"BackupAndRestore: {self._data_path} is not JSON ({e})") from None
        return records

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())
