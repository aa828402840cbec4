"""The ``local`` backend: N ranks as threads of one process, sharing memory.

Every rank runs the lowered program on its own thread (``RankExecutor``); buffers are
numpy arrays; kernels are ``numba.njit(nogil=True)`` functions, so the rank threads
compute in parallel. Collectives work on shared memory, zero-copy: each rank publishes
its buffers to its group, and

* all_reduce: rank i reduces its share of the elements straight from every peer's send
  buffer and writes the result straight into every peer's receive buffer;
* reduce_scatter: rank i reduces block i from the peers' send buffers into its own;
* all_gather: rank i writes its block into every peer's receive buffer;
* reduce / broadcast: like all_reduce / a copy from the root's buffer;
* send / recv (grouped): mailboxes, the receiver copies from the sender's buffer;
* a fused all-reduce planned ``zero_copy`` (``rt.fused``): one kernel per rank over its
  block that reduces the gradient from the peers, applies the fused computation in the
  same loop and writes gathered results into every peer's buffer (CoCoNet's
  FusedAllReduce, the fused-operator paper's zero-copy path); nothing is stored in
  between.

Programs run as planned for the ``local`` target (``lowering/target.py``): the runner
plans a program that is not planned yet, and the copies of the collectives stream as the
program's ``stream_from`` says.

Stream 1 (``coll.overlap``) is a worker thread per rank. A failure on one rank aborts
the others (no deadlock) and is reported with the rank. Ranks that are threads of the
caller (``step.local_comms``) can also stop without a word: a rank's thread that raised
or returned while its peers wait for it in a collective. The waiters find that
themselves (``LocalWorld.watch``, every ``TIMEOUT`` seconds of a wait): a peer whose
thread has ended (for ``GONE_GRACE`` seconds, so that a rank moving to another thread is
not taken for gone) or a wait longer than the world's ``timeout`` fails the world, and
every wait raises ``CommError`` with the message that names the rank and the cause.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from distir.dialects.diagnostics import InputRejected
from distir.runtime.comm import P2P, CommError
from distir.runtime.executor import ExecutionFailed, LoweredProgram, RankExecutor
from distir.runtime.host import HostDevice
from distir.runtime.scattered import ScatteredArray, copy_into, segments
from distir.runtime.values import reduce_arrays

TIMEOUT = 0.05
"""Seconds between two looks at the world's state while a rank waits."""
WAIT_LIMIT = 300.0
"""Default seconds a rank waits in one collective before it gives up (``LocalWorld``)."""
GONE_GRACE = 1.0
"""Seconds a rank's thread must have ended before its waiting peers take it for gone."""

# ======================================================================================
# Element-wise reductions over peers (numba, generated per peer count and reduction)
# ======================================================================================

_REDUCERS: dict[tuple[int, int, str], Any] = {}
_REDUCER_LOCK = threading.Lock()


def _reducer(n_src: int, n_dst: int, op: str):
    """``f(s0..s{n-1}, d0..d{m-1}, lo, hi)``: d_k[i] = op(s_0[i], ..., s_{n-1}[i]) for
    lo <= i < hi (in list order; avg divides the sum by n)."""
    key = (n_src, n_dst, op)
    fn = _REDUCERS.get(key)
    if fn is not None:
        return fn
    from distir.lowering import numba_codegen as cg

    srcs = [f"s{j}" for j in range(n_src)]
    dsts = [f"d{k}" for k in range(n_dst)]
    if op in ("sum", "avg", "prod"):
        sep = " * " if op == "prod" else " + "
        expr = "(" + sep.join(f"{s}[i]" for s in srcs) + ")"
        if op == "avg":
            expr = f"({expr} / {n_src})"
    else:
        fname = "_fmax" if op == "max" else "_fmin"
        expr = f"{srcs[0]}[i]"
        for s in srcs[1:]:
            expr = f"{fname}({expr}, {s}[i])"
    # Unsigned indices: with a signed start numba keeps its negative-index fix-up on
    # every load and store, and LLVM cannot vectorise the loop (6x slower at 2^23).
    # (Streaming stores, as in bulk.py, were no faster here: 10.5 against 10.0 ms.)
    lines = [
        f"def reduce({', '.join(srcs + dsts)}, lo, hi):",
        "    for i in range(numba.uint64(lo), numba.uint64(hi)):",
        f"        v = {expr}",
    ]
    lines += [f"        {d}[i] = v" for d in dsts]
    src = cg._header("cpu") + "\n\n" + "\n".join(lines) + "\n"
    ks = cg.KernelSource("reduce", src, "cpu", [])
    with _REDUCER_LOCK:
        fn = _REDUCERS.get(key)
        if fn is None:
            fn = _REDUCERS[key] = cg.compile_cpu(ks)
    return fn


def reduce_into(op: str, srcs: Sequence[np.ndarray], dsts: Sequence[np.ndarray], lo: int, hi: int) -> None:
    """dsts[k][lo:hi] = op over srcs[j][lo:hi] (flat arrays), as ``values.reduce_arrays``."""
    if hi <= lo:
        return
    if any(isinstance(a, ScatteredArray) for a in (*srcs, *dsts)):
        # Per contiguous piece of every buffer (scattered tensors).
        for a, b, views in segments([*srcs, *dsts], lo, hi):
            reduce_into(op, views[: len(srcs)], views[len(srcs) :], 0, b - a)
        return
    dt = srcs[0].dtype
    if dt in (np.float32, np.float64):
        _reducer(len(srcs), len(dsts), op)(*srcs, *dsts, lo, hi)
        return
    value = reduce_arrays([s[lo:hi] for s in srcs], op, dt)
    for d in dsts:
        d[lo:hi] = value


def share(count: int, parts: int, i: int) -> tuple[int, int]:
    """Range of the elements that part i of ``parts`` handles."""
    return count * i // parts, count * (i + 1) // parts


# ======================================================================================
# Communicators
# ======================================================================================


class LocalWorld:
    """The state the rank threads of one run share: every group's barrier, and the abort
    flag that stops all waits when a rank fails (``fail``; ``cause`` is the message every
    wait then raises). ``timeout`` bounds one wait in a collective (seconds)."""

    def __init__(self, ranks: int, timeout: float = WAIT_LIMIT):
        self.ranks = ranks
        self.timeout = timeout
        self.abort = threading.Event()
        self.errors: dict[int, BaseException] = {}
        self.cause: str | None = None
        self.threads: dict[int, threading.Thread] = {}
        """rank -> the thread that last entered a collective for it."""
        self._gone: dict[int, tuple[threading.Thread, float]] = {}
        self._groups: list[_Group] = []
        self._lock = threading.Lock()
        self.root = _Group(ranks, self, list(range(ranks)))

    def register(self, g: _Group) -> None:
        with self._lock:
            self._groups.append(g)

    def fail(self, rank: int, error: BaseException) -> None:
        with self._lock:
            self.errors.setdefault(rank, error)
            if self.cause is None:
                text, who = str(error), f"rank {rank}" if rank >= 0 else "a stream"
                self.cause = text if isinstance(error, CommError) or text.startswith(who) else f"{who}: {type(error).__name__}: {text}"
            groups = list(self._groups)
        self.abort.set()
        for g in groups:
            g.barrier.abort()
            with g.cond:
                g.cond.notify_all()

    def failure(self, what: str) -> CommError:
        """The error every wait raises once the world failed: the cause, the same on every
        rank (``what``, where this rank waited, when there is none)."""
        return CommError(self.cause or f"a peer failed while {what}")

    def watch(self, me: int, members: Sequence[int], started: float) -> None:
        """Called by rank ``me`` while it waits for ``members`` (world ranks) since
        ``started`` (``time.monotonic``): fail the world when one of them is gone (its
        thread ended) or the wait is over the timeout (module doc)."""
        now = time.monotonic()
        gone = None
        with self._lock:
            for r in members:
                t = self.threads.get(r)
                if r == me or t is None or t.is_alive():
                    self._gone.pop(r, None)
                    continue
                seen = self._gone.get(r)
                if seen is None or seen[0] is not t:
                    self._gone[r] = (t, now)
                elif now - seen[1] >= GONE_GRACE:
                    gone = r
                    break
        if gone is not None:
            self.fail(gone, CommError(
                f"rank {gone} stopped (its thread ended) while rank {me} waited for it in a collective: "
                "a rank that raises or returns early must not leave its peers in a collective (every rank makes the same calls)"
            ))
        elif now - started > self.timeout:
            self.fail(me, CommError(f"rank {me} waited {self.timeout:g} s in a collective for its peers and gave up (local_comms(timeout=...))"))

    def comm(self, rank: int) -> LocalComm:
        return LocalComm(self.root, rank, self)


class _Barrier:
    """A reusable barrier for the rank threads of a group, with ``threading.Barrier``'s
    interface (``wait``, ``abort``, ``BrokenBarrierError``) at half its cost: each
    thread blocks on a lock of its own that the last one to arrive releases (no
    condition variable, no lock allocated per wait). A collective meets at two of them,
    so this is most of the fixed cost of a collective on ``local``."""

    def __init__(self, parties: int):
        self.parties = parties
        self._count = 0
        self._mutex = threading.Lock()
        self._waiting: list[threading.Lock] = []
        self._own = threading.local()
        self._broken = False

    def wait(self, watch=None) -> None:
        """Wait for every party; ``watch(started)`` is called every ``TIMEOUT`` seconds
        of the wait (it may abort the barrier)."""
        me = getattr(self._own, "lock", None)
        if me is None:
            me = self._own.lock = threading.Lock()
            me.acquire()
        with self._mutex:
            if self._broken:
                raise threading.BrokenBarrierError
            self._count += 1
            if self._count == self.parties:
                release, self._waiting, self._count = self._waiting, [], 0
            else:
                self._waiting.append(me)
                release = None
        if release is not None:
            for lock in release:
                lock.release()
            return
        started = time.monotonic()
        while not me.acquire(timeout=TIMEOUT):
            if self._broken:
                raise threading.BrokenBarrierError
            if watch is not None:
                watch(started)
        if self._broken:
            raise threading.BrokenBarrierError

    def abort(self) -> None:
        with self._mutex:
            self._broken = True
            release, self._waiting = self._waiting, []
        for lock in release:
            lock.release()


class _Group:
    def __init__(self, size: int, world: LocalWorld, members: list[int]):
        self.size = size
        self.members = members
        """The world rank of each group rank."""
        self.barrier = _Barrier(size)
        # two sets of slots, used in turn by the group's successive publications: a rank
        # that leaves a collective right after publishing (``peer_buffers``) writes the
        # other set in its next one, while a slower peer may still read this one
        self.slots: list[list[Any]] = [[None] * size, [None] * size]
        self.turn = [0] * size
        self.splits: dict[tuple[int, int], _Group] = {}
        self.lock = threading.Lock()
        self.cond = threading.Condition()
        self.mail: dict[tuple[int, int], deque] = {}
        world.register(self)


class _Mail:
    def __init__(self, buf: np.ndarray, count: int):
        self.buf = buf
        self.count = count
        self.done = threading.Event()


class LocalComm:
    """One rank's handle on a group of rank threads (see the module doc)."""

    PLAN_TARGET = "local"
    """The target rank threads execute (``executor.runner_target``)."""

    def __init__(self, group: _Group, rank: int, world: LocalWorld):
        self.g = group
        self.rank = rank
        self.size = group.size
        self.world = world
        self.world_rank = group.members[rank]
        self._splits = 0
        # this rank's communication on the group runs in the order the program issues it,
        # whichever stream it is on (as NCCL orders a communicator's operations): two
        # streams' collectives on one group would otherwise meet other ranks' in another
        # order (issue 27: a ring overlap's all_gather on stream 1 beside an all_reduce
        # on stream 0)
        self._issued = 0
        self._next = 0
        self._order = threading.Condition()

    def _submit(self, stream, work) -> None:
        """``work`` (a collective or a group of sends and receives) on ``stream``, after
        every operation this rank issued on the group before it."""
        ticket = self._issued
        self._issued += 1

        def run() -> None:
            with self._order:
                while self._next != ticket:
                    if self.world.abort.is_set():
                        raise self.world.failure(f"rank {self.world_rank} waited for its earlier communication")
                    self._order.wait(TIMEOUT)
            try:
                work()
            finally:
                with self._order:
                    self._next += 1
                    self._order.notify_all()

        stream.submit(run)

    def _watch(self, started: float) -> None:
        self.world.watch(self.world_rank, self.g.members, started)

    def _sync(self) -> None:
        self.world.threads[self.world_rank] = threading.current_thread()
        try:
            self.g.barrier.wait(self._watch)
        except threading.BrokenBarrierError:
            raise self.world.failure(f"rank {self.world_rank} waited in a collective") from None

    def abort(self, message: str) -> None:
        """This rank cannot go on: every wait of the world raises with ``message``."""
        self.world.fail(self.world_rank, CommError(message))

    def _publish(self, value: Any) -> list[Any]:
        g = self.g
        turn = g.turn[self.rank]
        g.turn[self.rank] = 1 - turn
        slots = g.slots[turn]
        slots[self.rank] = value
        self._sync()
        return list(slots)

    def split(self, color: int, key: int) -> LocalComm:
        seq = self._splits
        self._splits += 1
        slots = self._publish((color, key))
        members = sorted((k, r) for r, (c, k) in enumerate(slots) if c == color)
        with self.g.lock:
            sub = self.g.splits.get((seq, color))
            if sub is None:
                sub = self.g.splits[(seq, color)] = _Group(len(members), self.world, [self.g.members[r] for _, r in members])
        self._sync()
        return LocalComm(sub, [r for _, r in members].index(self.rank), self.world)

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, send, recv, count, op, stream) -> None:
        self._submit(stream, lambda: self._all_reduce(send, recv, count, op))

    def _all_reduce(self, send, recv, count, op) -> None:
        slots = self._publish((send.reshape(-1), recv.reshape(-1)))
        lo, hi = share(count, self.size, self.rank)
        reduce_into(op, [s for s, _ in slots], [d for _, d in slots], lo, hi)
        self._sync()

    def reduce_scatter(self, send, recv, count, op, stream) -> None:
        self._submit(stream, lambda: self._reduce_scatter(send, recv, count, op))

    def _reduce_scatter(self, send, recv, count, op) -> None:
        slots = self._publish(send.reshape(-1))
        base = self.rank * count
        reduce_into(op, [s[base : base + count] for s in slots], [recv.reshape(-1)], 0, count)
        self._sync()

    def all_gather(self, send, recv, count, stream, in_place=False, stream_from=None) -> None:
        self._submit(stream, lambda: self._all_gather(send, recv, count, in_place, stream_from))

    def _all_gather(self, send, recv, count, in_place, stream_from) -> None:
        slots = self._publish(recv.reshape(-1))
        mine = send.reshape(-1)
        base = self.rank * count
        for r, full in enumerate(slots):
            if not (in_place and r == self.rank):
                copy_into(full[base : base + count], mine, stream_from)
        self._sync()

    def reduce(self, send, recv, count, op, root, stream) -> None:
        self._submit(stream, lambda: self._reduce(send, recv, count, op, root))

    def _reduce(self, send, recv, count, op, root) -> None:
        slots = self._publish((send.reshape(-1), recv.reshape(-1)))
        lo, hi = share(count, self.size, self.rank)
        reduce_into(op, [s for s, _ in slots], [slots[root][1]], lo, hi)
        self._sync()

    def broadcast(self, send, recv, count, root, stream, stream_from=None) -> None:
        self._submit(stream, lambda: self._broadcast(send, recv, count, root, stream_from))

    def _broadcast(self, send, recv, count, root, stream_from) -> None:
        slots = self._publish(send.reshape(-1))
        copy_into(recv.reshape(-1)[:count], slots[root][:count], stream_from)
        self._sync()

    # ------------------------------------------------------------------ point to point
    def group(self, calls: list[P2P], stream) -> None:
        self._submit(stream, lambda: self._group(calls))

    def _group(self, calls: list[P2P]) -> None:
        posted = []
        g = self.g
        with g.cond:
            for c in calls:
                if c.kind == "send":
                    m = _Mail(c.buffer.reshape(-1), c.count)
                    g.mail.setdefault((self.rank, c.peer), deque()).append(m)
                    posted.append(m)
            g.cond.notify_all()
        started = time.monotonic()
        self.world.threads[self.world_rank] = threading.current_thread()
        for c in calls:
            if c.kind != "recv":
                continue
            with g.cond:
                box = g.mail.setdefault((c.peer, self.rank), deque())
                while not box:
                    if self.world.abort.is_set():
                        raise self.world.failure(f"rank {self.world_rank} waited for a message")
                    g.cond.wait(TIMEOUT)
                    if not box:
                        self._watch(started)
                m = box.popleft()
            if m.count != c.count:
                m.done.set()
                raise CommError(f"rank {self.rank} expected {c.count} elements from group rank {c.peer}, got {m.count}")
            copy_into(c.buffer.reshape(-1)[: c.count], m.buf[: c.count], c.stream_from)
            m.done.set()
        for m in posted:
            while not m.done.wait(TIMEOUT):
                if self.world.abort.is_set():
                    raise self.world.failure(f"rank {self.world_rank} waited for its message to be received")
                self._watch(started)

    # ------------------------------------------------------------------ shared buffers
    def peer_buffers(self, arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Every group rank's ``arrays`` (collective; see ``HostDevice.zero_copy_fused``)."""
        return self._publish(arrays)

    def peer_barrier(self) -> None:
        self._sync()

    def tile_flags(self, count: int):
        """This rank's handle on ``count`` per-tile ready flags per rank shared by the
        group (the fused tile operators, ``tiles.py``); the ranks' k-th calls share one
        set."""
        from distir.runtime.tiles import ThreadFlags

        seq = self.__dict__.setdefault("_tile_seq", 0)
        self._tile_seq = seq + 1
        g = self.g
        with g.lock:
            table = g.__dict__.setdefault("tile_flags", {})
            flags = table.get(seq)
            if flags is None:
                flags = table[seq] = ThreadFlags(self.size, count, self.world.abort, lambda r, t: self.world.watch(g.members[r], g.members, t))
        return flags.handle(self.rank)


# ======================================================================================
# The backend
# ======================================================================================


class LocalRunner:
    """A lowered program bound to N rank threads; ``step`` runs every rank once.

    ``bind(inputs)`` cuts logical inputs into per-rank buffers (reused by every step,
    written in place by in-place results); ``step()`` returns every rank's results.
    ``comm_wrapper`` wraps each rank's world communicator (``recording.RecordingComm``);
    ``device`` replaces the host device (the CUDA device in numba's simulator)."""

    def __init__(self, program: LoweredProgram, parallel: bool | None = None, comm_wrapper=None, device=None):
        self.program = program
        n = program.ranks
        if parallel is None:
            parallel = (os.cpu_count() or 1) >= 2 * n
        self.world = LocalWorld(n)
        self.blas_threads = max(1, (os.cpu_count() or 1) // n)
        if device is None:
            device = HostDevice(
                parallel=parallel, abort=self.world.abort, on_error=lambda e: self.world.fail(-1, e), blas_threads=self.blas_threads
            )
        self.device = device
        comms = [self.world.comm(r) for r in range(n)]
        if comm_wrapper is not None:
            comms = [comm_wrapper(c) for c in comms]
        self.executors = [RankExecutor(program, r, comms[r], self.device) for r in range(n)]
        self.args: list[list[Any]] = [[] for _ in range(n)]
        self._jobs: list[queue.Queue] = [queue.Queue() for _ in range(n)]
        self._done: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._serve, args=(r,), name=f"rank{r}", daemon=True) for r in range(n)]
        for t in self._threads:
            t.start()

    def bind(self, inputs: Mapping[str, np.ndarray]) -> None:
        self.args = [self.program.rank_args(inputs, r, self.device) for r in range(self.program.ranks)]

    def _serve(self, rank: int) -> None:
        from distir.runtime.host import limit_blas_threads

        limit_blas_threads(self.blas_threads)
        ex = self.executors[rank]
        while True:
            job = self._jobs[rank].get()
            if job is None:
                return
            try:
                out = ex.run(self.args[rank])
                for s in ex.streams.values():
                    s.synchronize()
                self._done.put((rank, out, None))
            except BaseException as e:  # noqa: BLE001 - reported by step()
                self.world.fail(rank, e)
                self._done.put((rank, None, e))

    def step(self) -> list[list[Any]]:
        n = self.program.ranks
        for q in self._jobs:
            q.put(True)
        results: list[Any] = [None] * n
        errors: dict[int, BaseException] = {}
        for _ in range(n):
            rank, out, err = self._done.get()
            results[rank] = out
            if err is not None:
                errors[rank] = err
        if errors or self.world.abort.is_set():
            self.close()
            raise _first_failure({**errors, **self.world.errors})
        return results

    def close(self) -> None:
        for q in self._jobs:
            q.put(None)
        for ex in self.executors:
            for s in ex.streams.values():
                s.close()

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the rank threads to end after ``close`` (a thread holds its runner,
        and so every buffer, until it does)."""
        for t in self._threads:
            t.join(timeout=timeout)

    def outputs(self, results: list[list[Any]]) -> list[np.ndarray]:
        """Logical outputs (copies: later steps write the buffers again)."""
        return self.program.collect(results, lambda b: np.array(self.device.to_host(b)))


def _first_failure(errors: dict[int, BaseException]) -> BaseException:
    """The error to report: a rank's own failure rather than the communication errors it
    caused on its peers (stream failures are reported as rank -1)."""
    causes = {r: e for r, e in errors.items() if not isinstance(e, CommError)} or errors
    rank = min(causes, key=lambda r: (r < 0, r))
    err = causes[rank]
    if isinstance(err, (ExecutionFailed, InputRejected)):
        return err
    where = f"rank {rank}" if rank >= 0 else "a stream"
    failure = ExecutionFailed(f"{where} failed: {type(err).__name__}: {err}")
    failure.__cause__ = err
    return failure


MAX_RANKS = 64
"""The most ranks the ``local`` backend runs. Each rank is a thread that meets its peers
at every collective, so the cost of a step grows faster than the rank count (measured on
2 cores: 8 ranks 2 s, 64 ranks 5 s, 128 ranks 13 s for one small all-reduce, start-up
included); more ranks are rejected with a pointer to ``interpret`` (any rank count,
1,000 ranks in about a second for a small program) and ``mpi``."""


class LocalBackend:
    """``local``: lower (if needed) and run on N rank threads of this process (at most
    ``MAX_RANKS``). ``scatter`` names arguments given as lists of pieces (``scattered.py``)."""

    name = "local"
    supports_scatter = True

    def run(self, module: ModuleOp, func: str, inputs: Mapping[str, np.ndarray], ranks: int, seed: int, scatter: Sequence[str] = ()) -> list[np.ndarray]:
        from distir.runtime import scattered

        if ranks > MAX_RANKS:
            raise InputRejected(
                f"the local backend runs at most {MAX_RANKS} ranks (threads of one process), not {ranks}: "
                f"use --backend interpret (the reference interpreter, any rank count) or --backend mpi (mpiexec -n {ranks})"
            )
        program = LoweredProgram.build(module, func, ranks, scattered=scatter)
        pieces: dict = {}
        if scatter:
            full, pieces = scattered.prepare(program, inputs, scatter, seed)
        else:
            full = program.prepare_inputs(inputs, seed)
        runner = LocalRunner(program)
        try:
            runner.args = [program.rank_args(full, r, runner.device, pieces) for r in range(ranks)]
            outputs = runner.outputs(runner.step())
        finally:
            runner.close()
        return scattered.as_pieces(program, outputs, pieces) if scatter else outputs


def run_local(module: ModuleOp | str, func: str | None = None, inputs: Mapping[str, np.ndarray] | None = None, ranks: int = 1, seed: int = 0) -> list[np.ndarray]:
    """Run a function on the ``local`` backend; returns its logical outputs."""
    from distir.runtime.interpreter import as_module

    return LocalBackend().run(as_module(module), func, inputs or {}, ranks, seed)  # type: ignore[arg-type]
