"""ActorFlow from Python: ActorFlow's pipelines feeding your own training loop.

    import actorflow
    pipeline = actorflow.Pipeline.from_file("input.pbtxt").validate()
    for batch in pipeline.iterate(outlet="out", epochs=3):
        images = torch.from_dlpack(batch["image"])   # no copy
        ...

docs/python.md has the whole story: install, the API, lifetimes and
threads, and tables for users of PyTorch's DataLoader and of DALI.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

import numpy as np

if int(np.__version__.split(".")[0]) >= 2:
    # The extension module (pybind11 2.10) knows NumPy 1.x's structures only.
    raise ImportError(f"actorflow needs NumPy 1.x (>= 1.22, < 2); this is NumPy {np.__version__}: "
                      "pip install 'numpy<2'")

from . import _actorflow
from ._run import run

__all__ = [
    "Array",
    "BatchIterator",
    "JobError",
    "Pipeline",
    "Progress",
    "Result",
    "StageStats",
    "TopologyError",
    "run",
    "set_log_level",
    "__version__",
]

__version__ = _actorflow.version


def set_log_level(level: str) -> None:
    """The engine's log level, for jobs in this process: "trace", "debug",
    "info" (the default), "warn", "error" or "off". Its log goes to stderr."""
    _actorflow.set_log_level(level)


class TopologyError(ValueError):
    """A topology that does not load: `errors` holds every problem, each as
    "file:line: message" (or "file: message" without a line)."""

    def __init__(self, errors: List[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class JobError(RuntimeError):
    """The job failed. The message is the job's one-line error ("stage
    'decode' failed: ..."); `result` is the job's Result."""

    def __init__(self, message: str, result: Optional["Result"] = None):
        self.result = result
        super().__init__(message)


class Array(np.ndarray):
    """A read-only NumPy array over the memory of an ActorFlow batch: nothing
    was copied, and the array keeps that memory alive for as long as it (or
    anything made from it without a copy) lives.

    `torch.from_dlpack(a)` and `jax.dlpack.from_dlpack(a)` take it without a
    copy too (NumPy's own `__dlpack__` refuses read-only arrays). The tensor
    they make shares the batch's memory: do not write to it (a `cache`
    stage hands out the same memory every epoch); copy it first (`.clone()`)
    to change it.
    """

    def __array_finalize__(self, obj):
        self._af_bf16 = getattr(obj, "_af_bf16", False)

    def __dlpack__(self, stream=None):
        if stream is not None and stream != -1:
            raise BufferError("ActorFlow arrays are in host memory: no stream")
        return _actorflow.to_dlpack(self, self._af_bf16)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


@dataclass
class StageStats:
    """What one stage replica reported last (docs/monitoring.md)."""

    label: str
    stage: str
    replica: int
    is_sink: bool
    items_in: int
    records_in: int
    bytes_in: int
    items_out: int
    records_out: int
    bytes_out: int
    busy_s: float
    wait_input_s: float
    wait_credit_s: float
    epochs_ended: int
    metrics: Dict[str, float] = field(default_factory=dict)


@dataclass
class Progress:
    """A snapshot of a running job: totals over the sinks, and every
    replica's latest report."""

    elapsed_s: float
    items: int
    records: int
    bytes: int
    stages: List[StageStats] = field(default_factory=list)

    @classmethod
    def _of(cls, d: dict) -> "Progress":
        stages = [StageStats(**s) for s in d["stages"]]
        return cls(d["elapsed_s"], d["items"], d["records"], d["bytes"], stages)


@dataclass
class Result:
    """How a job ended. `ok` is False after a failure, whose one line is
    `error`; `stopped` means it was stopped early (and drained). `restarts`
    holds a line per start after a lost node (docs/multi-host.md,
    "Restarting after a lost node")."""

    ok: bool
    stopped: bool
    error: str
    final: Optional[Progress] = None
    tolerated_failures: List[str] = field(default_factory=list)
    restored: List[str] = field(default_factory=list)
    checkpoints: int = 0
    last_checkpoint: str = ""
    restarts: List[str] = field(default_factory=list)
    report: Optional[dict] = None  # actorflow.run(): the --report-json object

    @classmethod
    def _of(cls, d: dict) -> "Result":
        return cls(
            ok=d["ok"],
            stopped=d["stopped"],
            error=d["error"],
            final=Progress._of(d["final"]),
            tolerated_failures=list(d["tolerated_failures"]),
            restored=list(d["restored"]),
            checkpoints=d["checkpoints"],
            last_checkpoint=d["last_checkpoint"],
            restarts=list(d["restarts"]),
        )


class Pipeline:
    """A topology (docs/topology.md), from a file or from text."""

    def __init__(self, source: str, name: str, is_file: bool):
        self._source = source
        self._name = name
        self._is_file = is_file

    @classmethod
    def from_file(cls, path) -> "Pipeline":
        """The topology in the file `path` (.pbtxt). Nothing is read yet:
        validate() or iterate() reads it."""
        path = os.fspath(path)
        return cls(path, path, True)

    @classmethod
    def from_text(cls, text: str, name: str = "<text>") -> "Pipeline":
        """A topology given as text; `name` stands for the file in errors."""
        return cls(text, name, False)

    @property
    def name(self) -> str:
        return self._name

    def errors(self) -> List[str]:
        """Every problem of the topology as "file:line: message"; empty when
        it loads."""
        return _actorflow.check(self._source, self._name, self._is_file)

    def validate(self) -> "Pipeline":
        """Raises TopologyError with every problem; returns the pipeline."""
        errors = self.errors()
        if errors:
            raise TopologyError(errors)
        return self

    def iterate(
        self,
        outlet: Optional[str] = None,
        epochs: Optional[int] = None,
        threads: Optional[int] = None,
    ) -> "BatchIterator":
        """Starts the job in this process and iterates over the batches of
        its `outlet` stage (the only one when None), each a dict of field
        name -> Array.

        epochs: stop after this many epochs, by the batches' epoch numbers
        (the sources must make at least that many); None: as the topology
        says. threads: scheduler threads (None: every core). Raises
        TopologyError when the topology does not load, ValueError for an
        outlet that is not there, JobError when the job cannot start.

        The job runs as `actorflow run` runs it (af::supervise): autotune
        when the topology asks for it, and a job with checkpoints that
        loses a node is started again from its newest checkpoint on the
        hosts that answer (result.restarts). The batches after that
        checkpoint then come again: at least once, not exactly once.
        """
        self.validate()
        if epochs is not None and epochs < 1:
            raise ValueError("epochs must be >= 1, or None")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1, or None")
        return BatchIterator(self, outlet, epochs, threads)


class BatchIterator:
    """The batches of one outlet of a running job (Pipeline.iterate()).

    Backpressure: a batch is acknowledged to the outlet when this iterator
    hands it out, so at most `outlet { in_flight }` batches (default 4) wait
    here, however slowly the loop consumes them. The GIL is released while
    waiting. The job's failure raises JobError here; Ctrl-C (KeyboardInterrupt)
    stops the job, drains it, and raises on. close() (or leaving a `with`
    block, or the end of the iteration) stops the job and waits for it.
    Use the iterator from one thread at a time.
    """

    # How long one wait lasts before Python gets to check for Ctrl-C.
    _poll_s = 0.1
    # How long close() waits for the job to drain, then to abort.
    close_timeout_s = 10.0

    def __init__(self, pipeline: Pipeline, outlet, epochs, threads):
        try:
            self._stream = _actorflow._Stream(
                pipeline._source,
                pipeline._name,
                pipeline._is_file,
                outlet or "",
                epochs or 0,
                threads or 0,
            )
        except RuntimeError as e:
            raise JobError(str(e)) from None
        self._result: Optional[Result] = None
        self._raised = False
        self._closing = threading.Lock()
        self.epoch: Optional[int] = None  # of the batch handed out last

    @property
    def outlet(self) -> str:
        return self._stream.outlet if self._stream is not None else ""

    def __iter__(self) -> Iterator[Dict[str, Array]]:
        return self

    def __next__(self) -> Dict[str, Array]:
        try:
            stream = self._stream
            if stream is None:
                self._raise_if_failed()
                raise StopIteration
            while True:
                kind, fields, epoch, bf16 = stream.next(self._poll_s)
                if kind == 0:
                    self.epoch = epoch
                    return _arrays(fields, bf16)
                if kind == 1:
                    self._finish()
                    self._raise_if_failed()
                    raise StopIteration
        except KeyboardInterrupt:
            self.close()
            raise

    @property
    def progress(self) -> Optional[Progress]:
        """The job's latest progress report (every 0.5 s), or None before
        the first; after the end, the final one."""
        result, stream = self._result, self._stream
        if result is not None:
            return result.final
        if stream is None:
            return None
        p = stream.progress()
        return None if p is None else Progress._of(p)

    @property
    def result(self) -> Optional[Result]:
        """How the job ended; None while it runs."""
        return self._result

    def stop(self) -> None:
        """Ends the job early: the sources stop, what is in flight drains
        and is dropped; the iteration then ends (result.stopped)."""
        stream = self._stream
        if stream is not None:
            stream.stop()

    def close(self) -> None:
        """Stops the job if it still runs and waits for its end: at most
        close_timeout_s for it to drain, as long again after aborting it,
        and as long again for its actor system to shut down. Arrays handed
        out stay valid."""
        self._finish()

    def _finish(self) -> None:
        with self._closing:
            stream = self._stream
            if stream is None:
                return
            stream.close(self.close_timeout_s)
            self._result = Result._of(stream.result())
            self._stream = None

    def _raise_if_failed(self) -> None:
        # Once: after the JobError, the iteration is over.
        r = self._result
        if r is not None and not r.ok and not self._raised:
            self._raised = True
            raise JobError(r.error, r)

    def __enter__(self) -> "BatchIterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_stream", None) is not None:
            self._finish()


def _arrays(fields: dict, bf16: List[str]) -> Dict[str, Array]:
    out = {}
    for name, value in fields.items():
        a = value.view(Array)
        if name in bf16:
            a._af_bf16 = True
        out[name] = a
    return out
