"""Per-rank steps: a program compiled once per rank, called again and again by that rank
on its own buffers, in place and zero-copy (DESIGN §6).

``distir-run`` runs a program as a whole job on npz files; a training script instead owns
its buffers (a model's parameters and gradients) and wants one call per training step
that updates them where they are. A ``Step`` is that call::

    from distir.runtime import step

    program = step.compile(text, ranks=2, pipeline="fuse-maps,split-allreduce{targets=avg},...")
    comms = step.local_comms(2)                 # ranks as threads; mpi_comm() under mpiexec
    s = step.Step(program, comms[rank])         # once per rank (kernels, communicators,
                                                # fused plans and shared buffers are made once)
    g, p, m, v = (s.empty(name) for name in ("g", "p", "m", "v"))   # or the caller's own arrays
    for _ in range(steps):
        ...                                     # fill g
        s(g, p, m, v, lr, beta1, beta2, eps, t) # p, m, v updated in place

A rank's buffer of an argument has the argument's per-rank shape (``Step.arguments``:
the lowered signature's, the logical shape with sliced dims replaced by the largest
block, and a dim a collective cuts padded to a multiple of the group where the ranks do
not divide it: ``lowering/padding.py``; the rank's block is at the start) and element
type; buffers may
be numpy arrays, anything with the buffer protocol, or DLPack objects (a CPU torch
tensor), all taken without a copy (``__cuda_array_interface__`` objects on a CUDA device).
A buffer of the wrong shape, type or layout is rejected (``InputRejected``) on **every**
rank: before each call the ranks agree on whether all of them were given valid buffers
(one small collective), so that one rank's mistake never leaves its peers waiting in a
collective. Results written in place are the argument buffers; other results are the
step's own buffers, valid until its next call.

Where the buffers live matters for speed: the zero-copy fused collectives (a fused
all-reduce that reduces straight from the peers' gradients and writes the gathered
parameters straight into the peers' buffers) need every rank's buffers visible to its
peers. ``Step.empty(name)`` allocates an argument's buffer there: plain memory for ranks
that are threads (``local``), the node's MPI-3 shared-memory window under ``mpiexec``
(``mpi``), the shared-memory segments a communicator brings (``shm.py``: the
``torch.distributed`` bridge of ``frameworks/``). Buffers elsewhere still work, over the
communicator's plain collectives.

Communicators: ``local_comms(n)`` (threads of this process), ``mpi_comm()`` (the
processes of ``mpiexec``), or any object with the ``comm.Comm`` protocol; one that has a
``bind_program(program)`` method gives each step its own communicator and device (the
shared-memory window sized for that program).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType, ModuleOp

from distir.dialects.diagnostics import InputRejected
from distir.dialects.dist import TensorType
from distir.runtime.comm import CommError
from distir.runtime.executor import ExecutionFailed, LoweredProgram, RankExecutor
from distir.runtime.streams import SyncStream
from distir.runtime.values import numpy_dtype


def compile(program: ModuleOp | str, func: str | None = None, ranks: int = 1, pipeline: str | None = None) -> LoweredProgram:
    """``program`` (a module or its text) with ``pipeline`` (a ``-p`` string, dist level)
    applied, lowered for ``ranks`` ranks: what every rank's ``Step`` runs. The module is
    copied first (the caller's stays as it was). Raises ``InputRejected`` with the
    diagnostic when the program, the pipeline or the sizes are wrong (a program that
    does not verify included), and ``PassProducedInvalidIR`` naming the pass when a
    pass of the pipeline or of the lowering breaks the program (a bug in distir)."""
    from xdsl.utils.exceptions import ParseError, VerifyException

    from distir.dialects.context import parse_module
    from distir.dialects.verifier import verified_clone
    from distir.runtime import npz

    try:  # nothing that does not verify runs (free when the module verified already)
        module = parse_module(program) if isinstance(program, str) else verified_clone(program)
    except (ParseError, VerifyException) as e:
        raise InputRejected(f"the program is not valid distir IR: {e}") from None
    if pipeline:
        from xdsl.utils.exceptions import DiagnosticException

        from distir.passes.pipeline import apply_pipeline

        try:
            apply_pipeline(module, pipeline)
        except DiagnosticException as e:
            raise InputRejected(f"pipeline '{pipeline}': {e}") from None
    f = npz.select_function(module, func)
    npz.check_sizes(f, npz.resolve_grids(module, ranks), ranks)
    return LoweredProgram.build(module, func, ranks)


@dataclass(frozen=True)
class Argument:
    """One argument of a step as a rank passes it: its name, this rank's buffer shape and
    numpy dtype (``shape`` is None for a scalar), and the result written into it in place
    (None when it is only read)."""

    name: str
    shape: tuple[int, ...] | None
    dtype: np.dtype
    inplace: int | None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape or (), dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Result:
    """One result of a step: this rank's shape and numpy dtype (``shape`` None for a
    scalar) and the argument it is written into in place (None: a buffer of the step)."""

    shape: tuple[int, ...] | None
    dtype: np.dtype
    inplace: int | None


def local_comms(ranks: int, timeout: float | None = None) -> list[Any]:
    """One communicator per rank for ``ranks`` threads of this process (``local``). A
    rank waits at most ``timeout`` seconds in one collective (default
    ``local.WAIT_LIMIT``), and a peer whose thread has ended is found at once: every
    waiting rank then raises ``CommError`` naming it (``local.LocalWorld``)."""
    from distir.runtime.local import WAIT_LIMIT, LocalWorld

    world = LocalWorld(ranks, WAIT_LIMIT if timeout is None else timeout)
    return [world.comm(r) for r in range(ranks)]


def mpi_comm(comm: Any = None) -> Any:
    """This process's communicator over ``comm`` (default ``MPI.COMM_WORLD``): ``mpi``.
    Collective the first time: it installs the job's guard (``mpi.guard_job``), which
    ends the job with a message when a rank leaves (an exception, an early exit) while
    its peers wait for it in a collective, instead of a hang."""
    from mpi4py import MPI

    from distir.runtime.mpi import MpiComm, guard_job

    guard_job()
    return MpiComm(comm if comm is not None else MPI.COMM_WORLD)


def bind(comm: Any, program: LoweredProgram) -> tuple[Any, Any]:
    """(communicator, device) for one step of ``program`` on ``comm``: the rank threads
    share plain memory; under MPI a shared-memory window on the node is made for the
    step (collective over the ranks); other communicators say with ``bind_program``."""
    hook = getattr(comm, "bind_program", None)
    if hook is not None:
        return hook(program)
    from distir.runtime.local import LocalComm

    if isinstance(comm, LocalComm):
        from distir.runtime.host import HostDevice

        return comm, HostDevice(abort=comm.world.abort)
    from distir.runtime.mpi import MpiComm

    if isinstance(comm, MpiComm):
        from distir.runtime.mpi import MpiDevice, _shared_heap

        heap = _shared_heap(comm.comm, program)
        return MpiComm(comm.comm, heap), MpiDevice(heap)
    from distir.runtime.host import HostDevice

    return comm, HostDevice()


class Step:
    """``program`` as one rank's callable (module doc). ``comm`` is this rank's
    communicator; its size must be the rank count the program was compiled for."""

    def __init__(self, program: LoweredProgram, comm: Any):
        if comm.size != program.ranks:
            raise InputRejected(
                f"the program was compiled for {program.ranks} ranks, the communicator has {comm.size}: "
                f"compile it with ranks={comm.size}"
            )
        self.program = program
        self.rank = comm.rank
        self.comm, self.device = bind(comm, program)
        self.executor = RankExecutor(program, self.rank, self.comm, self.device)
        self.arguments = _arguments(program)
        self.results = _results(program)
        self.calls = 0
        if program.arenas():
            raise InputRejected("a step takes its arguments one by one: compile the program without 'lower-buckets' arenas")

    def __repr__(self) -> str:
        return f"Step(@{self.program.func.sym_name.data}, rank {self.rank} of {self.program.ranks})"

    def argument(self, name: str) -> Argument:
        for a in self.arguments:
            if a.name == name:
                return a
        raise InputRejected(f"the step has no argument '{name}' (arguments: {', '.join(a.name for a in self.arguments)})")

    def empty(self, name: str) -> np.ndarray:
        """A zeroed buffer for argument ``name`` where this step's peers can see it
        (module doc); plain memory when there is no room or no sharing."""
        a = self.argument(name)
        if a.shape is None:
            raise InputRejected(f"argument '{name}' is a scalar: pass a number")
        heap = getattr(self.device, "heap", None)
        buf = heap.alloc(a.shape, a.dtype, "args") if heap is not None else None
        if buf is None:
            from distir.runtime.buffers import new_buffer

            buf = new_buffer(a.shape, a.dtype)
        return buf

    def empty_together(self, names: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One zeroed 1-D buffer holding the buffers of arguments ``names`` (all of one
        dtype) side by side, where the peers can see it (``empty``), and the argument
        buffers as views of it: a caller's arena (a model's parameters, laid out once)."""
        args = [self.argument(n) for n in names]
        if any(a.shape is None for a in args) or len({a.dtype for a in args}) != 1:
            raise InputRejected(f"arguments {', '.join(names)} are not tensors of one dtype")
        sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in args]
        total = sum(sizes)
        heap = getattr(self.device, "heap", None)
        flat = heap.alloc((total,), args[0].dtype, "args") if heap is not None else None
        if flat is None:
            from distir.runtime.buffers import new_buffer

            flat = new_buffer((total,), args[0].dtype)
        views, at = [], 0
        for a, n in zip(args, sizes):
            views.append(flat[at : at + n].reshape(a.shape))
            at += n
        return flat, views

    # ------------------------------------------------------------------ calling
    def __call__(self, *args: Any) -> list[Any]:
        """Run the program once on this rank's buffers (collective over the ranks);
        returns the results (module doc)."""
        try:
            bufs = self._buffers(args)
            problem = None
        except InputRejected as e:
            bufs, problem = [], str(e)
        self.agree(problem)
        return self._execute(bufs)

    def run(self, *args: Any) -> list[Any]:
        """``__call__`` without the agreement: for a caller whose buffers were checked
        when it made them (a bad buffer then raises on this rank only)."""
        return self._execute(self._buffers(args))

    def _execute(self, bufs: list[Any]) -> list[Any]:
        self.calls += 1
        ex = self.executor
        try:
            out = ex.run(bufs)
            for s in ex.streams.values():
                s.synchronize()
        except (InputRejected, ExecutionFailed, CommError) as e:
            self._fail(e)
            raise
        except Exception as e:  # noqa: BLE001 - reported with the rank; peers are released
            failure = ExecutionFailed(f"rank {self.rank}: {type(e).__name__}: {e}")
            self._fail(failure)
            raise failure from e
        return out

    def agree(self, problem: str | None, digest: int = 0, what: str = "their calls", fingerprint: Mapping[str, str] | None = None) -> None:
        """Collective: raise ``InputRejected`` on every rank when some rank has a
        ``problem`` (the message names the ranks and what was wrong on them), or when the
        ranks' ``digest``s (a caller's plan of the collective calls to come) or
        ``fingerprint``s differ (``agree``)."""
        agree(self.comm, problem, {**(fingerprint or {}), **({what: str(digest)} if digest else {})}, what)

    def _fail(self, error: BaseException) -> None:
        """This rank failed inside a call, its peers may wait for it in a collective:
        the communicator's ``abort`` (``comm.py``: the rank threads' waits raise, an MPI
        job ends, ...)."""
        text = str(error)
        abort = getattr(self.comm, "abort", None)
        if callable(abort):
            abort(text if text.startswith(f"rank {self.rank}") else f"rank {self.rank}: {text}")

    def _buffers(self, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.arguments):
            names = ", ".join(a.name for a in self.arguments)
            raise InputRejected(f"the step takes {len(self.arguments)} arguments ({names}), got {len(args)}")
        return [self._buffer(a, x) for a, x in zip(self.arguments, args)]

    def _buffer(self, a: Argument, x: Any) -> Any:
        if a.shape is None:
            if isinstance(x, (int, float, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0):
                return a.dtype.type(x)
            raise InputRejected(f"argument '{a.name}' is a scalar ({a.dtype}), got {type(x).__name__}")
        arr = as_array(x, self.device)
        if arr is None:
            raise InputRejected(f"argument '{a.name}': a {type(x).__name__} is not an array (numpy, buffer protocol or DLPack)")
        if isinstance(x, (bytearray, memoryview)) and arr.dtype == np.uint8 and arr.ndim == 1 and arr.size % a.dtype.itemsize == 0:
            arr = arr.view(a.dtype)  # untyped bytes hold the argument's elements
        if arr.dtype != a.dtype:
            raise InputRejected(f"argument '{a.name}' must hold {a.dtype}, got {arr.dtype}")
        if tuple(arr.shape) != a.shape:
            if arr.size != int(np.prod(a.shape, dtype=np.int64)) or not _contiguous(arr):
                raise InputRejected(f"argument '{a.name}' must have shape {list(a.shape)} on rank {self.rank}, got {list(arr.shape)}")
            arr = arr.reshape(a.shape)
        if not _contiguous(arr):
            raise InputRejected(f"argument '{a.name}' must be contiguous (C order)")
        if a.inplace is not None and not _writeable(arr):
            raise InputRejected(f"argument '{a.name}' is updated in place: its buffer must be writeable")
        return arr


def _arguments(program: LoweredProgram) -> list[Argument]:
    inplace = {arg: res for res, arg in program.inplace().items()}
    out = []
    for i, ((name, t), lowered) in enumerate(zip(program.signature(), program.func.function_type.inputs.data)):
        if isinstance(t, TensorType):
            assert isinstance(lowered, MemRefType)
            out.append(Argument(name, tuple(lowered.get_shape()), np.dtype(numpy_dtype(t.element_type)), inplace.get(i)))
        else:
            out.append(Argument(name, None, np.dtype(numpy_dtype(t)), None))
    return out


def _results(program: LoweredProgram) -> list[Result]:
    inplace = program.inplace()
    out = []
    for i, (t, lowered) in enumerate(zip(program.result_types(), program.func.function_type.outputs.data)):
        if isinstance(t, TensorType):
            assert isinstance(lowered, MemRefType)
            out.append(Result(tuple(lowered.get_shape()), np.dtype(numpy_dtype(t.element_type)), inplace.get(i)))
        else:
            out.append(Result(None, np.dtype(numpy_dtype(t)), None))
    return out


def agree(comm: Any, problem: str | None, fingerprint: Mapping[str, str] | None = None, what: str = "their calls") -> None:
    """Collective over ``comm``: return on every rank when no rank has a ``problem`` and
    every rank's ``fingerprint`` (what must be alike on every rank: the call it makes,
    the plan of its collectives) is the same; else raise ``InputRejected`` on every rank
    with one message, the same everywhere, naming the ranks and their problem, or each
    entry of the fingerprint that differs from rank 0's (``what`` says what they are).

    One ``all_gather`` of two words (a problem flag, a digest of the fingerprint) when
    all is well; only on a disagreement a second exchange of every rank's text. Any two
    calls of ``agree`` pair up across ranks (fixed sizes), so ranks that make different
    calls (one in ``step()``, another in ``state_dict()``) find out here: every
    collective of a framework bridge begins with one."""
    fp = {k: str(v) for k, v in (fingerprint or {}).items()}
    digest = int.from_bytes(hashlib.sha256(json.dumps(sorted(fp.items())).encode()).digest()[:7], "little")
    mine = np.array([1 if problem else 0, digest], np.int64)
    every = np.zeros(2 * comm.size, np.int64)
    stream = SyncStream(0)
    comm.all_gather(mine, every, 2, stream)
    flags, digests = every[0::2], every[1::2]
    if not flags.any() and (digests == digests[0]).all():
        return
    texts = exchange(comm, json.dumps({"problem": problem or "", "fingerprint": fp}).encode())
    info = [json.loads(t.decode(errors="replace") or "{}") for t in texts]
    lines = [f"rank {r}: {i['problem']}" for r, i in enumerate(info) if i.get("problem")]
    if lines:
        raise InputRejected("; ".join(lines))
    base = info[0]["fingerprint"]
    odd = [r for r in range(1, len(info)) if info[r]["fingerprint"] != base]
    diffs = []
    for key in sorted(set(base).union(*(info[r]["fingerprint"] for r in odd))):
        values = {r: info[r]["fingerprint"].get(key, "(none)") for r in [0, *odd]}
        if len(set(values.values())) > 1:
            others = ", ".join(f"rank {r} has {v}" for r, v in values.items() if r and v != values[0])
            diffs.append(f"{key}: rank 0 has {values[0]}, {others}")
    raise InputRejected(f"ranks {odd} differ from rank 0 in {what} ({'; '.join(diffs)}): every rank must make the same calls")


def exchange(comm: Any, data: bytes) -> list[bytes]:
    """Every rank's ``data`` (collective over ``comm``: two all-gathers, the lengths and
    then the bytes padded to the longest)."""
    stream = SyncStream(0)
    sizes = np.zeros(comm.size, np.int64)
    comm.all_gather(np.array([len(data)], np.int64), sizes, 1, stream)
    width = max(int(sizes.max()), 1)
    mine = np.zeros(width, np.uint8)
    mine[: len(data)] = np.frombuffer(data, np.uint8)
    every = np.zeros(width * comm.size, np.uint8)
    comm.all_gather(mine, every, width, stream)
    return [bytes(every[r * width : r * width + int(sizes[r])]) for r in range(comm.size)]


def as_array(x: Any, device: Any = None) -> Any:
    """``x`` as the device's array without a copy: numpy arrays as they are, DLPack and
    buffer-protocol objects through numpy, ``__cuda_array_interface__`` objects through
    numba on a CUDA device; None when ``x`` is none of these."""
    if isinstance(x, np.ndarray):
        return x
    if getattr(device, "target", "cpu") == "cuda" and hasattr(x, "__cuda_array_interface__"):
        from numba import cuda

        return cuda.as_cuda_array(x)
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError) as e:
            raise InputRejected(f"a {type(x).__name__} could not be shared through DLPack: {e}") from None
    try:
        return np.asarray(memoryview(x))
    except TypeError:
        return None


def _contiguous(a: Any) -> bool:
    flags = getattr(a, "flags", None)
    if flags is None:
        return bool(getattr(a, "is_c_contiguous", lambda: True)())
    return bool(flags["C_CONTIGUOUS"] if not hasattr(flags, "c_contiguous") else flags.c_contiguous)


def _writeable(a: Any) -> bool:
    flags = getattr(a, "flags", None)
    return True if flags is None or not hasattr(flags, "writeable") else bool(flags.writeable)
