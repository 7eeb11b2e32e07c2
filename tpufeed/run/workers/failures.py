"""How the iterator words a worker's failure: a worker that ended, never started or stays
stopped (`WorkerError`, naming the chunk it was making and the file of its first record), and
an error a worker reported, rebuilt with the worker's traceback."""

from __future__ import annotations

from typing import Any

from tpufeed import errors
from tpufeed.errors import WorkerError
from tpufeed.ops.base import Chunk

_RESUME = "Resume from the last get_state() with a new iterator."


def making(chunk: Chunk, names: Any) -> str:
    """ " while making the chunk of records a..b (the first: where)": what a lost worker was
    doing, for its error (`names`: the plan's source, which words a record and its file)."""
    first, last = int(chunk.records[0]), int(chunk.records[-1])
    where = names.describe(first) if names is not None else f"record {first}"
    return f" while making the chunk of records {first}..{last} (the first: {where})"


def never_started(worker: int, lost: str) -> WorkerError:
    return WorkerError(
        f"tpufeed worker {worker} never started: {lost}. Workers are forked by that "
        "server; the next iterator starts a new one."
    )


def ended(worker: int, pid: int, code: int | None, work: str) -> WorkerError:
    """Worker `worker` (`pid`) ended with returncode `code` (None: it closed its pipe and runs
    on) while doing `work` (see `making`)."""
    how = (
        f"was killed by signal {-code}"
        if code is not None and code < 0
        else "exited without being asked to (exit status 0, or another wait in this process "
        "took its status: os.wait(), or SIGCHLD set to SIG_IGN)"
        if code == 0
        else f"exited with code {code}"
        if code is not None
        else "closed its pipe to this process while still running (a transform that closes "
        "file descriptors it did not open?)"
    )
    return WorkerError(
        f"tpufeed worker {worker} (pid {pid}) {how}{work}; the iterator cannot continue. {_RESUME}"
    )


def segment_removed(worker: int, pid: int, path: str) -> WorkerError:
    """Worker `worker` (`pid`) runs on, but the shared-memory file of the batch it sent is gone."""
    return WorkerError(
        f"the batch tpufeed worker {worker} (pid {pid}) sent is lost: its shared-memory file "
        f"{path} was removed before this process could map it, while the worker still runs. "
        "Something else deletes files in /dev/shm (a cleanup job, or another container sharing "
        f"it); keep it off tpufeed-* files. {_RESUME}"
    )


def stopped(
    worker: int, pid: int, seconds: float, stopped_s: float, work: str, server: int | None
) -> WorkerError:
    """Worker `worker` (`pid`) has stayed stopped `seconds` while doing `work`; `server`: the
    pid of its fork server where that is stopped too (then nothing of the run can answer)."""
    also = (
        f" Its fork server (pid {server}) is stopped too; the next iterator starts a new one."
        if server is not None
        else ""
    )
    return WorkerError(
        f"tpufeed worker {worker} (pid {pid}) has been stopped (SIGSTOP or SIGTSTP: process "
        f"state T) for {seconds:.0f} s{work}; a stopped process answers nothing until it gets "
        f"SIGCONT (kill -CONT {pid}). The pipeline is stopped and its workers killed.{also} "
        f"{_RESUME[:-1]}; options(stopped_s=...) sets how long a stopped worker is waited for "
        f"(now {stopped_s:g} s; None: until it continues)."
    )


def rebuild_error(fields: dict[str, Any], worker: int) -> errors.TpufeedError:
    """The parent-side error for a failure a worker reported, with the worker's traceback."""
    cls = getattr(errors, fields["type"], None)
    if not (isinstance(cls, type) and issubclass(cls, errors.TpufeedError)):
        cls = errors.TransformError if fields.get("record") is not None else errors.WorkerError
    message = (
        f"{fields['type']}: {fields['message']}"
        if cls is not getattr(errors, fields["type"], None)
        else fields["message"]
    )
    text = f"{message}\n\nin tpufeed worker {worker}:\n{fields['traceback']}"
    if issubclass(cls, errors.TransformError):
        return cls(
            text,
            record=fields.get("record"),
            path=fields.get("path"),
            traceback_text=fields["traceback"],
        )
    if issubclass(cls, errors.SourceError):
        return cls(text, path=fields.get("path"), record=fields.get("record"))
    try:
        return cls(text)
    except TypeError:
        return errors.WorkerError(text)
