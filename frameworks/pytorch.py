"""distir inside PyTorch (DESIGN §6): distributed optimizers with the ``torch.optim``
contract, and distir programs as ``torch.library`` custom ops.

**Optimizers** ``Adam``, ``AdamW``, ``SGD`` (and ``LAMB``) take torch's arguments plus
``schedule=``, ``comm=``, ``clip_grad_norm=`` and ``loss_scaling=``, and replace DDP's
gradient all-reduce plus the update with one distir step per arena
(``frameworks/optimizers.py``)::

    model = GPT(...)                                   # no DDP wrapper
    opt = distir.frameworks.pytorch.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for x, y in batches:                               # this rank's shard of the data
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()                                     # average the gradients + AdamW

At construction every parameter that requires grad moves into the arena of its dtype
(one per dtype, over every param group; frozen parameters stay out, never updated): its
data becomes a view of the parameter arena and its ``.grad`` a view of the gradient arena
(``p.data`` and ``p.grad`` keep the parameter's shape and layout: the model sees no
difference); backward accumulates into the arena in place, and ``step()`` runs the fused
collective on the arenas themselves: no per-step packing copy. The arenas live where the
communicator shares memory (the MPI-3 window under ``mpiexec``, shared-memory segments
under ``torchrun``), so the fused all-reduce is zero-copy. Optimizer state is sliced
(ZeRO-1): ``optimizer.state[p]`` holds this rank's slice of
``exp_avg``/``exp_avg_sq``/``momentum_buffer`` as 1-D tensors; bf16 and f16 parameters
add their slice of the f32 ``master`` weights (CoCoNet's mixed precision: the fused
collective averages the half-precision gradients, updates the f32 master slice and
writes the rounded parameters into every rank's model). ``state_dict()`` (collective)
returns the full state in torch's format, which ``torch.optim.AdamW.load_state_dict``
takes, and ``load_state_dict`` takes torch's; ``sharded_state_dict()`` is the same for
``torch.distributed.checkpoint``, each rank's slice as a ``ShardedState``.

``zero_grad()`` sets ``.grad`` to None as torch does; the next backward's gradient then
moves into the arena (one copy, in a post-accumulate-grad hook, instead of a zeroed arena
plus an accumulation), and later backwards accumulate into it in place (gradient
accumulation, with no communication). A parameter whose ``.grad`` is None at ``step()``
is skipped, as torch skips it (every rank must agree on which: the ranks run the same
steps). A ``.grad`` replaced by another tensor of the right shape and type is copied
into the arena. ``clip_grad_norm=`` clips to the global norm inside the collective;
``GradScaler`` decides there whether a loss-scaled step has an inf or NaN.

``comm=``: a ``torch.distributed`` ProcessGroup, a runtime communicator (``runtime/step.py``:
``local_comms``, ``mpi_comm``), or None: the default process group when one is
initialized, else MPI's ``COMM_WORLD`` when started by ``mpiexec``, else one rank.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np

from distir.dialects.diagnostics import InputRejected, require_extra
from distir.frameworks import optimizers as core
from distir.runtime import step as steps
from distir.runtime.values import BFLOAT16

torch = require_extra("torch", "torch", "distir.frameworks.pytorch")

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16"}


# ======================================================================================
# Communicators
# ======================================================================================


def default_comm(comm: Any = None) -> Any:
    """The runtime communicator for ``comm`` (module doc)."""
    import torch.distributed as dist

    if comm is None:
        if dist.is_available() and dist.is_initialized():
            return _torch_comm(None)
        if any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "HYDRA_CONTROL_FD")):
            return steps.mpi_comm()
        return steps.local_comms(1)[0]
    if comm == "mpi":
        return steps.mpi_comm()
    if dist.is_available() and isinstance(comm, dist.ProcessGroup):
        return _torch_comm(comm)
    return comm


def _torch_comm(group):
    from distir.frameworks.torch_comm import TorchComm

    return TorchComm(group)


# ======================================================================================
# Optimizers
# ======================================================================================


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A numpy arena as a torch tensor, no copy (bf16 through its bits: numpy's bf16 is
    ml_dtypes', which torch does not take)."""
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _dense_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides ``t``'s arena views take: ``t``'s own when its elements are dense and
    non-overlapping in some order (a transposed or channels-last parameter keeps its
    layout, as torch.optim keeps it), else contiguous ones."""
    contiguous = torch.empty(t.shape, device="meta").stride()
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return contiguous
        expect *= sz
    return tuple(t.stride())


class _Arena:
    """The optimizer's parameters of one dtype (of every group): their arenas and step
    (``optimizers.ArenaGroup``, numpy) and the torch views the model sees (``p.data``,
    ``p.grad``, ``optimizer.state[p]``). Tensor i is parameter ``index_in_group[i]`` of
    param group ``group_of[i]``; the program takes the hyperparameters of the groups
    ``group_index`` (in that order). Made on every rank at once (collective): the
    parameters move into the arena and rank 0's values are broadcast, as DDP does at
    construction (the master weights start from them)."""

    def __init__(self, spec: core.Spec, params: list[torch.Tensor], where: list[tuple[int, int]], comm: Any, schedule: str | None):
        self.params = params
        self.dtype = params[0].dtype
        self.shapes = [tuple(p.shape) for p in params]
        self.group_of = [gi for gi, _ in where]
        self.index_in_group = [j for _, j in where]
        self.group_index = sorted(set(self.group_of))
        local = [self.group_index.index(g) for g in self.group_of]
        self.strides = [_dense_strides(p) for p in params]
        self.arena = core.ArenaGroup(spec, [p.numel() for p in params], comm, schedule, local)
        self.spec = spec
        self.g_t = _tensor(self.arena.g)
        self.p_t = _tensor(self.arena.p)
        self.grad_views: list[torch.Tensor] = []
        self.param_ptrs: list[int] = []
        self.arrivals = [0] * len(params)
        """Gradients that arrived per parameter since the last step (backward passes)."""
        for i, p in enumerate(params):
            self.adopt(i)
            gview = self.grad_view(i)
            if p.grad is not None:
                gview.copy_(p.grad)
                p.grad = gview
            self.grad_views.append(gview)
        self.grad_ptrs = [v.data_ptr() for v in self.grad_views]
        self.arena.broadcast_parameters()
        for i in range(len(params)):
            self.start_master(i)

    @property
    def pipeline(self) -> str:
        return self.arena.pipeline

    def adopt(self, i: int) -> None:
        """Tensor i's values into the parameter arena, its ``.data`` a view of it (in its
        layout)."""
        p = self.params[i]
        with torch.no_grad():
            view = self.view(self.p_t, i)
            view.copy_(p.detach())
            p.data = view
        if len(self.param_ptrs) <= i:
            self.param_ptrs.append(view.data_ptr())
        self.param_ptrs[i] = view.data_ptr()

    def start_master(self, i: int) -> None:
        """Tensor i's master weights (this rank's slice) from its parameters, when the
        arena keeps master weights."""
        if self.spec.master:
            a, b = self.arena.element_span(i)
            off, _ = self.arena.span(i)
            self.arena.state_slice(0, i)[...] = self.arena.p[off + a : off + b].astype(np.float32)

    def rebound(self) -> tuple[list[int], str | None]:
        """The parameters whose ``.data`` was rebound after construction (``p.data = t``,
        ``torch.nn.utils.vector_to_parameters``), adopted again (their new values move
        into the arena, as ``torch.optim`` would update them); or what makes one of them
        impossible to adopt."""
        moved = []
        for i, p in enumerate(self.params):
            if p.data_ptr() == self.param_ptrs[i]:
                continue
            if p.layout != torch.strided or p.device.type != "cpu" or tuple(p.shape) != self.shapes[i] or p.dtype != self.dtype:
                return moved, (
                    f"parameter {self.index_in_group[i]} of group {self.group_of[i]} (shape {list(self.shapes[i])}) was rebound after "
                    f"the optimizer was made to a {p.layout} {p.dtype} tensor of shape {list(p.shape)} on {p.device}: rebind it to a "
                    "tensor of its shape and dtype, or make a new optimizer"
                )
            self.adopt(i)
            moved.append(i)
        return moved, None

    def view(self, flat: torch.Tensor, i: int) -> torch.Tensor:
        """Tensor i's part of an arena (parameters or gradients) in its shape and layout."""
        off, n = self.arena.span(i)
        return flat[off : off + n].as_strided(self.shapes[i], self.strides[i])

    def grad_view(self, i: int) -> torch.Tensor:
        """A new view of tensor i's part of the gradient arena."""
        return self.view(self.g_t, i)

    def state_view(self, k: int, i: int) -> torch.Tensor:
        """This rank's slice of state ``k`` of tensor ``i`` (1-D; empty when none)."""
        return _tensor(self.arena.state_slice(k, i))

    def shaped(self, flat: np.ndarray, i: int) -> torch.Tensor:
        """Tensor i's whole state (flat, in the arena's element order) as a new tensor of
        the parameter's shape and layout."""
        return _tensor(np.ascontiguousarray(flat)).as_strided(self.shapes[i], self.strides[i]).clone()

    def flat(self, value: torch.Tensor, i: int) -> np.ndarray:
        """A state tensor of parameter i's shape (any layout) as a flat array in the
        arena's element order."""
        p = self.params[i]
        buf = torch.empty_strided(self.shapes[i], self.strides[i], dtype=torch.float32 if self.spec.master else p.dtype)
        buf.copy_(value.detach())
        out = buf.as_strided((p.numel(),), (1,))
        return out.view(torch.uint16).numpy().view(BFLOAT16) if out.dtype == torch.bfloat16 else out.numpy()


def _group_problem(gi: int, params: list[torch.Tensor]) -> str | None:
    """What makes the parameters of group ``gi`` unfit for the arenas, or None (local: no
    communication)."""
    seen: dict[int, int] = {}
    for i, p in enumerate(params):
        if id(p) in seen:
            return (
                f"parameter {i} of group {gi} is parameter {seen[id(p)]} again: pass each parameter once "
                "(torch.optim warns that this will be an error; it updates such a parameter twice per step)"
            )
        seen[id(p)] = i
        if p.requires_grad and p.device.type != "cpu":
            return (
                f"parameter {i} of group {gi} is on {p.device}: distir's PyTorch optimizers keep their arenas in host "
                "memory and take CPU parameters only (a GPU step runs as a distir program on the nccl backend: docs/runtime.md)"
            )
        if p.requires_grad and p.dtype not in _DTYPES:
            return f"parameter {i} of group {gi}: parameters of dtype {p.dtype} are not supported (float32, float64, bfloat16, float16)"
    return None


_FLAGS = ("maximize", "amsgrad", "capturable", "differentiable")
"""``torch.optim`` options that change what a step computes and that distir's optimizers
do not implement: set, they are an error (at construction and in a loaded state dict),
never ignored. ``foreach`` and ``fused`` choose among torch's implementations of the same
arithmetic: distir's step is its own, so they are accepted and change nothing."""


def _flags_problem(group: dict, where: str) -> str | None:
    on = [f for f in _FLAGS if group.get(f)]
    if not on:
        return None
    return f"{where}: {', '.join(f'{f}=True' for f in on)} is not supported: distir's optimizers implement torch's default step only"


def _describe(params: list[torch.Tensor]) -> str:
    """A group's tensors in a few words (with a digest of every shape past the sixth)."""
    shapes = [f"{'x'.join(map(str, p.shape)) or 'scalar'}{'' if p.requires_grad else ' frozen'}" for p in params]
    dtypes = "/".join(sorted({str(p.dtype).removeprefix("torch.") for p in params}))
    text = f"{len(params)} {dtypes} tensors ({', '.join(shapes[:6])}"
    if len(shapes) > 6:
        text += f", ... #{hashlib.sha256(repr(shapes).encode()).hexdigest()[:8]}"
    return text + ")"


def _options(group: dict) -> str:
    return ", ".join(f"{k}={group[k]!r}" for k in sorted(group) if k != "params")


WHAT = "their calls of the optimizer"
"""What the agreements of the optimizers compare (``steps.agree``)."""

_TYPED: dict[type, type] = {}


def _rejected_as(error: type) -> type:
    """``InputRejected`` that is also torch's exception type ``error`` (ValueError,
    TypeError): a misuse torch.optim rejects raises what torch raises, on every rank."""
    cls = _TYPED.get(error)
    if cls is None:
        cls = _TYPED[error] = type(f"Rejected{error.__name__}", (InputRejected, error), {"__module__": __name__})
    return cls


class _DistirOptimizer(torch.optim.Optimizer):
    """The ``torch.optim.Optimizer`` contract over distir steps (module doc).

    Every collective method (construction, ``add_param_group``, ``step``, ``state_dict``
    when the ranks share no memory) begins with one agreement of the ranks
    (``steps.agree``): a problem on any rank, or ranks that differ in what shapes the step
    (the parameter groups, their options, the schedule; at ``step()`` which parameters
    have gradients, the backward passes since the last step, the hyperparameters, the
    parameters rebound), raises ``InputRejected`` on every rank (also torch's
    ``ValueError``/``TypeError`` where torch's own checks rejected the call); an error
    after it, in the middle of collectives, aborts the job through the communicator
    (``comm.abort``): no rank waits forever."""

    kind = ""
    state_names: tuple[str, ...] = ()
    exports_step = True
    """Whether ``state_dict`` has a ``step`` per parameter (torch's SGD has none)."""
    _step_supports_amp_scaling = True
    """torch's GradScaler then hands ``found_inf`` to ``step`` instead of deciding on its
    own: ``step`` refuses it (each rank's own decision), ``GradScaler`` below decides in
    the collective."""

    def __init__(self, params: Iterable, defaults: dict, schedule: str | None = None, comm: Any = None, nesterov: bool = False,
                 problem: BaseException | str | None = None, clip_grad_norm: float | None = None, loss_scaling: bool | None = None):
        self._wrapped = False
        self.comm = default_comm(comm)
        self.schedule = schedule
        self.nesterov = nesterov
        torch_error = type(problem) if isinstance(problem, (TypeError, ValueError)) else None
        problem = None if problem is None else str(problem)
        try:
            super().__init__(params, defaults)
        except (TypeError, ValueError) as e:  # torch's checks of the groups: reported on every rank, as torch's type
            if problem is None:
                problem, torch_error = str(e), type(e)
            self.param_groups = []
        if clip_grad_norm is not None and not (isinstance(clip_grad_norm, (int, float)) and clip_grad_norm > 0):
            problem = problem or f"clip_grad_norm must be a positive number, got {clip_grad_norm!r}"
        self.clip_grad_norm = None if clip_grad_norm is None or problem else float(clip_grad_norm)
        if loss_scaling is None:
            loss_scaling = any(p.dtype == torch.float16 and p.requires_grad for g in self.param_groups for p in g["params"])
        self.loss_scaling = bool(loss_scaling)
        self.last_grad_norm: float | None = None
        """The global 2-norm of the averaged gradients at the last step (before clipping),
        as ``torch.nn.utils.clip_grad_norm_`` returns it; with ``clip_grad_norm`` or loss
        scaling only (inf or NaN: that step was skipped)."""
        self._arenas: list[_Arena] = []
        self._where: dict[int, tuple[_Arena, int]] = {}
        self._frozen: set[int] = set()
        self._hooks: list[Any] = []
        self._check_same_groups(problem, torch_error)
        with self._collective("building the optimizer"):
            self._build()
        self._wrapped = True

    # ------------------------------------------------------------------ arenas
    def _members(self) -> dict[torch.dtype, list[tuple[int, int, torch.Tensor]]]:
        """(group, index in the group, parameter) of every parameter that requires grad,
        by dtype (in order of first appearance)."""
        by_dtype: dict[torch.dtype, list[tuple[int, int, torch.Tensor]]] = {}
        for gi, group in enumerate(self.param_groups):
            for j, p in enumerate(group["params"]):
                if p.requires_grad:
                    by_dtype.setdefault(p.dtype, []).append((gi, j, p))
        return by_dtype

    def _spec(self, dtype: torch.dtype) -> core.Spec:
        return core.Spec(self.kind, _DTYPES[dtype], self.nesterov, self.clip_grad_norm is not None, self.loss_scaling)

    def _build(self) -> None:
        """One arena per dtype over the parameters of every group that require grad (the
        others stay out, never updated); collective."""
        members = self._members()
        self._frozen = {id(p) for group in self.param_groups for p in group["params"] if not p.requires_grad}
        for h in self._hooks:
            h.remove()
        self._arenas, self._where, self._hooks = [], {}, []
        for dt, ms in members.items():
            arena = _Arena(self._spec(dt), [p for _, _, p in ms], [(gi, j) for gi, j, _ in ms], self.comm, self.schedule)
            self._arenas.append(arena)
            for i, p in enumerate(arena.params):
                self._where[id(p)] = (arena, i)
                self._hooks.append(p.register_post_accumulate_grad_hook(self._arrived))
                st = self.state[p]
                st["step"] = st.get("step", torch.tensor(0.0))
                for k, name in enumerate(self._names(arena)):
                    st[name] = arena.state_view(k, i)

    def _specs_problem(self) -> str | None:
        """What the options make impossible over these parameters, or None (local)."""
        dtypes = list(self._members())
        if self.kind == "lamb":
            if any(dt in (torch.bfloat16, torch.float16) for dt in dtypes):
                return "half-precision parameters are not supported yet (float32, float64)"
            if self.clip_grad_norm is not None or self.loss_scaling:
                return "clip_grad_norm and loss scaling are not supported (its trust ratio scales each tensor's update)"
        if len(dtypes) > 1 and (self.clip_grad_norm is not None or self.loss_scaling):
            return (
                "clip_grad_norm and loss scaling need every parameter in one arena (one fused collective computes the global norm), "
                f"but the parameters have several dtypes ({', '.join(str(d) for d in dtypes)}): give them one dtype"
            )
        return None

    def _names(self, arena: _Arena) -> tuple[str, ...]:
        """The state keys of an arena's state arrays (``optimizers.ArenaGroup.state``)."""
        return (("master",) if arena.spec.master else ()) + self.state_names

    # ------------------------------------------------------------------ agreements
    def _check_same_groups(self, problem: str | None = None, torch_error: type | None = None) -> None:
        """Collective: every rank must wrap the same parameter groups (their tensors'
        shapes and dtypes, which are frozen, their options) with the same schedule, and
        none may have a ``problem`` (or one found here: options distir does not
        implement, a group unfit for the arenas); else every rank raises ``InputRejected``
        naming the ranks and what differs (``steps.agree``), also of type
        ``torch_error`` when the problem is torch's own rejection. At construction, and
        at each change of the groups."""
        if problem is None:
            problem = next((why for gi, group in enumerate(self.param_groups)
                            for why in (_flags_problem(group, f"group {gi}"), _group_problem(gi, list(group["params"]))) if why), None)
        if problem is None:
            problem = self._specs_problem()
        call = f"{type(self).__name__}.add_param_group(...)" if getattr(self, "_wrapped", False) else f"{type(self).__name__}(...)"
        fingerprint = {"the call": call, "schedule=": repr(self.schedule), "clip_grad_norm=": repr(self.clip_grad_norm), "loss scaling": repr(self.loss_scaling)}
        for gi, group in enumerate(self.param_groups):
            fingerprint[f"group {gi}"] = _describe(list(group["params"]))
            fingerprint[f"group {gi} options"] = _options(group)
        try:
            steps.agree(self.comm, problem and f"{type(self).__name__}: {problem}", fingerprint, WHAT)
        except InputRejected as e:
            if torch_error is not None:
                raise _rejected_as(torch_error)(str(e)) from None
            raise

    def _collective(self, what: str):
        """``with``: collectives the ranks agreed on; an error in them on this rank ends
        the job through the communicator (``comm.abort``), its peers would wait."""
        return _AbortOnError(self.comm, f"{type(self).__name__}: {what}")

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``; after construction (collective: every rank adds
        the same group) the arenas are laid out again with the new parameters, the state
        of the others carried over."""
        if not getattr(self, "_wrapped", False):
            super().add_param_group(param_group)
            return
        problem, torch_error = None, None
        groups = len(self.param_groups)
        try:
            super().add_param_group(param_group)
        except (TypeError, ValueError) as e:  # torch's checks: reported on every rank
            problem, torch_error = str(e), type(e)
        try:
            self._check_same_groups(problem, torch_error)
        except InputRejected:
            del self.param_groups[groups:]  # as torch leaves the groups when it rejects one
            raise
        with self._collective("add_param_group()"):
            full = self._full_state()
            self._build()
            for arena in self._arenas:
                for i, p in enumerate(arena.params):
                    self._load_tensor_state(arena, i, full.get(id(p), {}))

    def _arrived(self, p: torch.Tensor) -> None:
        """After backward set ``p.grad``: a fresh gradient (``.grad`` was None, autograd
        gave it its own tensor) moves into the arena, one copy instead of a zeroed arena
        plus an accumulation; a gradient already in the arena was accumulated in place."""
        arena, i = self._where[id(p)]
        arena.arrivals[i] += 1
        grad = p.grad
        if grad is None or grad.layout != torch.strided or grad.data_ptr() == arena.grad_ptrs[i] and grad.dtype == p.dtype:
            return  # (a sparse gradient: step() reports it, on every rank)
        if _bad_grad(grad, p) is None:
            view = arena.grad_views[i]
            if view.data_ptr() != arena.grad_ptrs[i]:
                view = arena.grad_view(i)
            view.copy_(grad)
            p.grad = arena.grad_views[i] = view
        # else: step() reports it, on every rank

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure=None):
        if "found_inf" in self.__dict__:  # torch.amp.GradScaler.step, which decided on this rank's gradients
            raise InputRejected(
                f"{type(self).__name__}: torch.amp.GradScaler decides on each rank's own gradients; "
                "use distir.frameworks.pytorch.GradScaler, which decides inside the collective (every rank alike)"
            )
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._step(1.0)
        return loss

    def _step(self, inv_scale: float) -> bool:
        """Average the gradients and update, the gradients first multiplied by
        ``inv_scale`` (loss scaling); whether the step was skipped (an inf or NaN
        gradient, with loss scaling: decided inside the collective, alike on every rank)."""
        with torch_threads_kept():
            return self._step_kept(inv_scale)

    def _step_kept(self, inv_scale: float) -> bool:
        problem, plans, rebound = self._plan()
        backwards = max((max(a.arrivals, default=0) for a in self._arenas), default=0)
        fingerprint = {
            "the call": "step()",
            "the parameters with gradients (and their step counts)": self._plans_text(plans),
            "the backward passes since the last step() (a rank that skipped step() or ran another backward)": str(backwards),
            "the hyperparameters": " | ".join(_options(group) for group in self.param_groups),
            "the parameters rebound since the last step()": repr(rebound),
        }
        steps.agree(self.comm, problem, fingerprint, WHAT)
        skipped = False
        with self._collective("step()"):
            for k, arena in enumerate(self._arenas):
                moved = [i for a, i in rebound if a == k]
                if moved:
                    arena.arena.broadcast_parameters()
                    for i in moved:
                        arena.start_master(i)
            for arena, (cohorts, absent) in zip(self._arenas, plans):
                norm = self._run_arena(arena, cohorts, absent, inv_scale)
                if norm is not None:
                    self.last_grad_norm = norm
                    skipped = arena.spec.scaled and not np.isfinite(norm)
        for arena in self._arenas:
            arena.arrivals = [0] * len(arena.params)
        return skipped

    def _plan(self):
        """Per arena: the parameters to update grouped by their step count (one run of the
        step each), the ones without gradients; the parameters rebound since the last step
        (adopted again: ``_Arena.rebound``), as (arena, tensor); or what is wrong with
        them or their gradients."""
        problem = None
        changed = f"{type(self).__name__}: the parameters of a group changed after wrapping: use add_param_group, or create a new optimizer"
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if id(p) in self._where:
                    arena, i = self._where[id(p)]
                    if arena.group_of[i] == gi:
                        continue
                elif id(p) in self._frozen:
                    if p.grad is not None:
                        problem = (
                            f"a parameter of group {gi} (shape {list(p.shape)}) did not require grad when the optimizer was made, "
                            "and has a gradient now: it is not in the optimizer's arenas (add it with add_param_group, or make the optimizer after unfreezing)"
                        )
                    continue
                problem = changed
        if sum(len(g["params"]) for g in self.param_groups) != len(self._where) + len(self._frozen):
            problem = changed
        plans = []
        rebound: list[tuple[int, int]] = []
        for k, arena in enumerate(self._arenas):
            moved, why = arena.rebound()
            rebound += [(k, i) for i in moved]
            problem = problem or why
            cohorts: dict[float, list[int]] = {}
            absent: list[int] = []
            for i, p in enumerate(arena.params):
                grad = p.grad
                if grad is None:
                    absent.append(i)
                    continue
                if grad.layout != torch.strided or grad.data_ptr() != arena.grad_ptrs[i] or grad.dtype != p.dtype:
                    why = _bad_grad(grad, p)
                    if why:
                        problem = f"parameter {arena.index_in_group[i]} of group {arena.group_of[i]} (shape {list(p.shape)}): {why}"
                        continue
                    view = arena.grad_view(i)
                    view.copy_(grad)
                    p.grad = arena.grad_views[i] = view
                cohorts.setdefault(float(self.state[p]["step"]), []).append(i)
            plans.append((cohorts, absent))
        return problem, plans, rebound

    def _plans_text(self, plans) -> str:
        """Which parameters of each group have gradients, by step count (``_plan``),
        numbered as in their groups."""
        by_group: dict[int, tuple[dict[float, list[int]], list[int]]] = {gi: ({}, []) for gi in range(len(self.param_groups))}
        for arena, (cohorts, absent) in zip(self._arenas, plans):
            for count, members in cohorts.items():
                for i in members:
                    by_group[arena.group_of[i]][0].setdefault(count, []).append(arena.index_in_group[i])
            for i in absent:
                by_group[arena.group_of[i]][1].append(arena.index_in_group[i])
        return _plans_text([by_group[gi] for gi in sorted(by_group)])

    def _run_arena(self, arena: _Arena, cohorts: dict[float, list[int]], absent: list[int], inv_scale: float) -> float | None:
        if not cohorts:
            return None
        hypers = [self._hyper(self.param_groups[gi]) for gi in arena.group_index]
        extra = ([self.clip_grad_norm] if arena.spec.clip else []) + ([inv_scale] if arena.spec.scaled else [])
        norm = None
        for count, members in cohorts.items():
            keep = absent + [i for c, ms in cohorts.items() if c != count for i in ms]
            values = core.arguments(self.kind, [core.scalars(self.kind, h, int(count) + 1, first=count == 0) for h in hypers])
            norm = arena.arena.run(values + extra, keep, absent)
            if arena.spec.scaled and not np.isfinite(norm):
                return norm  # skipped on every rank: nothing changed, no step counted
            for i in members:
                self.state[arena.params[i]]["step"] += 1
        return norm

    def _hyper(self, group: dict) -> dict:
        return group

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad``: ``.grad`` becomes None (the next backward's gradients
        move into the arena, ``_arrived``), or with ``set_to_none=False`` the gradients
        that exist are zeroed in place (the arena; None ones stay None)."""
        for arena in self._arenas:
            if not set_to_none:
                arena.arena.g.fill(0)
            for i, p in enumerate(arena.params):
                if set_to_none or p.grad is None:
                    p.grad = None
                elif p.grad.data_ptr() != arena.grad_ptrs[i]:
                    p.grad = arena.grad_views[i] = arena.grad_view(i)
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in self._frozen and p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.zero_()

    # ------------------------------------------------------------------ state
    def _indexed(self):
        """(index in torch's state_dict, parameter) of every parameter, groups in order."""
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                yield index, p
                index += 1

    def state_dict(self) -> dict:
        """The full state in ``torch.optim``'s format; half-precision parameters add their
        f32 ``master`` weights (torch's optimizers ignore the key). Where the ranks share
        memory (rank threads, ``mpiexec`` or ``torchrun`` on one node) this rank reads its
        peers' state slices itself: it may be called on one rank alone (``if rank == 0:
        torch.save(opt.state_dict(), path)``). Elsewhere it is collective (every rank
        calls it; one that does not is found by the agreement, on every rank)."""
        if not all(a.arena.gathers_alone for a in self._arenas):
            steps.agree(self.comm, None, {"the call": COLLECTIVE_STATE_DICT}, WHAT)
        with self._collective("state_dict()"):
            fulls = {id(a): [a.arena.gather_state(k) for k in range(len(a.arena.state))] for a in self._arenas}
        sd = super().state_dict()
        state = {}
        for index, p in self._indexed():
            if id(p) not in self._where:
                if index in sd["state"]:
                    state[index] = sd["state"][index]
                continue
            arena, i = self._where[id(p)]
            entry = {"step": self.state[p]["step"].clone()} if self.exports_step else {}
            for k, name in enumerate(self._names(arena)):
                entry[name] = arena.shaped(arena.arena.tensor_of(fulls[id(arena)][k], i), i)
            state[index] = entry
        sd["state"] = state
        return sd

    def _full_state(self) -> dict[int, dict[str, np.ndarray]]:
        """Every parameter's whole state (flat, arena order; collective)."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for arena in self._arenas:
            fulls = [arena.arena.gather_state(k) for k in range(len(arena.arena.state))]
            for i, p in enumerate(arena.params):
                out[id(p)] = {"step": self.state[p]["step"].clone(), **{n: arena.arena.tensor_of(f, i).copy() for n, f in zip(self._names(arena), fulls)}}
        return out

    def _load_tensor_state(self, arena: _Arena, i: int, entry: dict) -> None:
        """Tensor i's state from ``entry`` (flat arrays in arena order, or torch tensors
        of the parameter's shape; missing: zeros, the master weights from the
        parameter), and its ``optimizer.state`` entry."""
        p = arena.params[i]
        # torch's SGD keeps no step count: a momentum buffer means "not the first step"
        step = entry.get("step", torch.tensor(1.0 if entry.get(self.state_names[0]) is not None else 0.0))
        new = {"step": torch.as_tensor(step, dtype=torch.float32).clone()}
        for k, name in enumerate(self._names(arena)):
            value = entry.get(name)
            if value is None and name == "master":
                off, n = arena.arena.span(i)
                value = arena.arena.p[off : off + n].astype(np.float32)
            elif isinstance(value, torch.Tensor):
                value = arena.flat(value, i)
            arena.arena.load_state(k, i, None if value is None else np.asarray(value).reshape(-1))
            new[name] = arena.state_view(k, i)
        self.state[p] = new

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict of this optimizer or of ``torch.optim``'s (full state). It is
        checked whole before anything is loaded (``InputRejected``: another model's
        state, another optimizer's, options distir does not implement): every rank given
        the same dict loads it or rejects it alike. Not collective: every rank loads its
        own slices from the full state."""
        why = self._state_dict_problem(state_dict)
        if why:
            raise InputRejected(f"{type(self).__name__}.load_state_dict: {why}")
        given = dict(state_dict["state"])  # before torch casts the moments to the parameters' dtype
        super().load_state_dict(state_dict)
        for index, p in self._indexed():
            if id(p) in self._where:
                arena, i = self._where[id(p)]
                self._load_tensor_state(arena, i, given.get(index, {}))

    def _state_dict_problem(self, sd: Any) -> str | None:
        """What makes ``sd`` unfit for this optimizer, or None."""
        if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict) or not isinstance(sd.get("param_groups"), list):
            return "not an optimizer state dict (a dict of 'state' and 'param_groups')"
        groups = sd["param_groups"]
        if len(groups) != len(self.param_groups):
            return f"the state dict has {len(groups)} parameter groups, the optimizer {len(self.param_groups)}"
        for gi, (saved, group) in enumerate(zip(groups, self.param_groups)):
            ids = list(saved.get("params", []))
            if len(ids) != len(group["params"]):
                return f"group {gi} of the state dict has {len(ids)} parameters, the optimizer's {len(group['params'])}: it is another model's state"
            why = _flags_problem(saved, f"group {gi} of the state dict")
            if why:
                return why
            for i, (key, p) in enumerate(zip(ids, group["params"])):
                st = sd["state"].get(key, {})
                names = set(self.state_names) | {"step"} | ({"master"} if p.dtype in (torch.bfloat16, torch.float16) else set())
                other = sorted(set(st) - names)
                if other:
                    return (f"parameter {i} of group {gi} has state {other} in the state dict: it is another optimizer's state "
                            f"({type(self).__name__} keeps {sorted(names)})")
                for name in sorted(names - {"step"}):  # one message, the same in every process
                    t = st.get(name)
                    if t is not None and (not isinstance(t, torch.Tensor) or t.numel() != p.numel()):
                        size = t.numel() if isinstance(t, torch.Tensor) else type(t).__name__
                        return (f"'{name}' of parameter {i} of group {gi} has {size} elements in the state dict, the parameter "
                                f"{p.numel()} (shape {list(p.shape)}): it is another model's state")
        return None

    def sharded_state_dict(self) -> dict:
        """The state in ``torch.optim``'s format for ``torch.distributed.checkpoint``, each
        state tensor a ``ShardedState`` of this rank's slice (no communication): with
        ``dcp.save`` every rank writes only its slice; with ``dcp.load`` (into the dict
        this returns, at any world size) every rank reads the pieces of its own slice
        straight into its arenas, re-sliced, and ``load_sharded_state_dict`` finishes.
        Step counts are plain tensors (the same on every rank); every kind exports one."""
        sd = torch.optim.Optimizer.state_dict(self)
        state = {}
        for index, p in self._indexed():
            if id(p) not in self._where:
                continue
            arena, i = self._where[id(p)]
            entry = {"step": self.state[p]["step"]}
            for k, name in enumerate(self._names(arena)):
                entry[name] = ShardedState(arena, k, i)
            state[index] = entry
        sd["state"] = state
        return sd

    def load_sharded_state_dict(self, state_dict: dict) -> None:
        """Finish ``dcp.load`` into ``sharded_state_dict()``: the slices are already in the
        arenas; the step counts and the param groups' hyperparameters are taken here."""
        steps_of = {index: entry["step"] for index, entry in state_dict["state"].items()}
        torch.optim.Optimizer.load_state_dict(self, {"state": {}, "param_groups": state_dict["param_groups"]})
        for index, p in self._indexed():
            if id(p) in self._where:
                arena, i = self._where[id(p)]
                new = {"step": torch.as_tensor(steps_of.get(index, 0.0), dtype=torch.float32).clone()}
                for k, name in enumerate(self._names(arena)):
                    new[name] = arena.state_view(k, i)
                self.state[p] = new

    @property
    def pipelines(self) -> list[str]:
        """The ``-p`` pipeline of each arena's step (one arena per parameter dtype)."""
        return [a.pipeline for a in self._arenas]

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds (master weights included)."""
        return core.state_bytes([s for a in self._arenas for s in a.arena.state])


class ShardedState(torch.Tensor):
    """One state tensor of a parameter (its shape and dtype) of which this rank holds a
    slice, as ``torch.distributed.checkpoint`` saves and loads it: the slice (a flat
    range of the parameter's elements in memory order) is cut into boxes
    (``optimizers.boxes``), the chunks this rank writes and reads, straight from and
    into its arena (DCP's ``_Checkpointable`` protocol, as DTensor implements it). It
    holds no data of its own: it only goes through DCP."""

    @staticmethod
    def __new__(cls, arena: _Arena, k: int, i: int):
        p = arena.params[i]
        dtype = torch.float32 if arena.spec.master else p.dtype
        t = torch.Tensor._make_wrapper_subclass(cls, p.shape, dtype=dtype, device=torch.device("cpu"), requires_grad=False)
        t._pieces = _pieces(arena, k, i)
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise TypeError(f"a {cls.__name__} holds a rank's slice for torch.distributed.checkpoint only (got {func})")

    def __repr__(self) -> str:  # noqa: D105
        return f"ShardedState(shape={list(self.shape)}, dtype={self.dtype}, {len(self._pieces)} piece(s) on this rank)"

    def __create_write_items__(self, fqn: str, obj: Any) -> list:
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
        from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

        return [
            WriteItem(
                index=MetadataIndex(fqn, torch.Size(offsets)),
                type=WriteItemType.SHARD,
                tensor_data=TensorWriteData(
                    chunk=ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)),
                    properties=TensorProperties.create_from_tensor(data),
                    size=self.size(),
                ),
            )
            for offsets, sizes, data in self._pieces
        ]

    def __create_chunk_list__(self) -> list:
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

        return [ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)) for offsets, sizes, _ in self._pieces]

    def __get_tensor_shard__(self, index) -> torch.Tensor:
        for offsets, _, data in self._pieces:
            if torch.Size(offsets) == index.offset:
                return data
        raise ValueError(f"{index.fqn}: this rank holds no piece at {list(index.offset)}")


def _pieces(arena: _Arena, k: int, i: int) -> list[tuple[tuple[int, ...], tuple[int, ...], torch.Tensor]]:
    """(offsets, sizes, view) of the boxes of this rank's slice of state ``k`` of tensor
    ``i``: the slice is a range of the tensor's elements in memory order, i.e. row-major
    over its dims sorted by stride; each box's view (of the arena) has the logical dims."""
    p = arena.params[i]
    strides = arena.strides[i]
    perm = sorted(range(p.dim()), key=lambda d: (-strides[d], d))
    pshape = [p.shape[d] for d in perm]
    a, _ = arena.arena.element_span(i)
    flat = arena.state_view(k, i)
    back = [perm.index(d) for d in range(p.dim())]
    out = []
    for po, pz, at in core.boxes(pshape, *arena.arena.element_span(i)):
        n = int(np.prod(pz, dtype=np.int64))
        view = flat[at - a : at - a + n].view(pz).permute(back) if p.dim() else flat[at - a : at - a + 1].view(())
        out.append((tuple(po[j] for j in back), tuple(pz[j] for j in back), view))
    return out


COLLECTIVE_STATE_DICT = (
    "state_dict() (collective here: the ranks share no memory, so every rank must call it; "
    "save on rank 0 only: sd = opt.state_dict(); if rank == 0: torch.save(sd, path))"
)


class _AbortOnError:
    """``with``: an error on this rank ends the job through ``comm.abort`` (its peers are
    in the same collectives and would wait for it), then goes on as raised."""

    def __init__(self, comm: Any, what: str):
        self.comm, self.what = comm, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> None:
        if value is not None and isinstance(value, Exception):
            text = str(value)
            rank = f"rank {self.comm.rank}"
            self.comm.abort(text if text.startswith(rank) else f"{rank}: {self.what} failed: {type(value).__name__}: {text}")


def _plans_text(plans) -> str:
    """Which parameters of each group have gradients, by step count: per group,
    (cohorts: step count -> indices in the group, indices without a gradient)."""
    out = []
    for gi, (cohorts, skipped) in enumerate(plans):
        parts = [f"step {int(c)}: {_ranges(ms)}" for c, ms in sorted(cohorts.items())]
        if skipped:
            parts.append(f"none: {_ranges(skipped)}")
        out.append(f"group {gi} ({'; '.join(parts) or 'no parameters'})")
    return ", ".join(out)


def _ranges(xs: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``."""
    out, run = [], []
    for x in sorted(xs):
        if run and x == run[-1] + 1:
            run.append(x)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [x]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _bad_grad(grad: torch.Tensor, p: torch.Tensor) -> str | None:
    """What makes ``grad`` unfit for ``p``'s place in the arena (any dense layout of the
    right shape and dtype is copied in), or None."""
    if grad.layout != torch.strided:
        return f"its gradient is sparse ({grad.layout}): distir's optimizers take dense gradients (nn.Embedding(sparse=False))"
    if grad.dtype != p.dtype:
        return f"its gradient is {grad.dtype}, the parameter {p.dtype}"
    if tuple(grad.shape) != tuple(p.shape):
        return f"its gradient has shape {list(grad.shape)}"
    return None


def _torch_defaults(cls, kwargs: dict) -> tuple[dict, BaseException | None]:
    """torch's own defaults and argument checks for ``cls`` (a torch.optim class): the
    defaults, or the error torch raised (reported by every rank's agreement, as torch's
    type)."""
    try:
        return dict(cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults), None
    except (TypeError, ValueError, RuntimeError) as e:
        return {}, e


class AdamW(_DistirOptimizer):
    """``torch.optim.AdamW`` as one distir step per arena (module doc)."""

    kind = "adam"
    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *, maximize=False,
                 schedule: str | None = None, comm: Any = None, clip_grad_norm: float | None = None, loss_scaling: bool | None = None,
                 **torch_kwargs):
        defaults, problem = _torch_defaults(
            self._torch_class(), dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize, **torch_kwargs)
        )
        super().__init__(params, defaults, schedule=schedule, comm=comm, problem=problem, clip_grad_norm=clip_grad_norm, loss_scaling=loss_scaling)

    @staticmethod
    def _torch_class():
        return torch.optim.AdamW

    def _hyper(self, group: dict) -> dict:
        return {**group, "decoupled": True}


class Adam(AdamW):
    """``torch.optim.Adam`` (L2 weight decay added to the gradient)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, **kwargs):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, **kwargs)

    @staticmethod
    def _torch_class():
        return torch.optim.Adam

    def _hyper(self, group: dict) -> dict:
        return {**group, "decoupled": bool(group.get("decoupled_weight_decay", False))}


class SGD(_DistirOptimizer):
    """``torch.optim.SGD`` with momentum (module doc)."""

    kind = "sgd"
    state_names = ("momentum_buffer",)
    exports_step = False

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *, maximize=False,
                 schedule: str | None = None, comm: Any = None, clip_grad_norm: float | None = None, loss_scaling: bool | None = None,
                 **torch_kwargs):
        defaults, problem = _torch_defaults(
            torch.optim.SGD, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov, maximize=maximize, **torch_kwargs)
        )
        super().__init__(params, defaults, schedule=schedule, comm=comm, nesterov=nesterov, problem=problem, clip_grad_norm=clip_grad_norm,
                         loss_scaling=loss_scaling)


class LAMB(_DistirOptimizer):
    """LAMB (You et al., CoCoNet's fuse(RS-LAMB-AG)): Adam's bias-corrected moments, the
    update u = m̂ / (√v̂ + eps) + wd·p scaled per parameter tensor by the trust ratio
    ‖p‖ / ‖u‖ (1 where a norm is 0); torch has no LAMB, the state is named as Adam's."""

    kind = "lamb"
    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, *, schedule: str | None = None, comm: Any = None):
        problem = None
        if not lr >= 0 or not eps >= 0 or not weight_decay >= 0 or not all(0 <= b < 1 for b in betas):
            problem = f"invalid hyperparameters lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}"
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay), schedule=schedule, comm=comm, problem=problem,
                         loss_scaling=False)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler`` for distir's optimizers (as FSDP's ``ShardedGradScaler``
    is for FSDP): ``scale``, ``step``, ``update`` as torch's, but whether a step has an
    inf or NaN gradient is decided inside the optimizer's collective, on the averaged
    gradients, so every rank skips alike and keeps the same scale (torch's scaler would
    decide on each rank's own gradients). The gradients are unscaled inside the
    collective too: ``unscale_`` is not needed (clip with the optimizer's
    ``clip_grad_norm=``). Other optimizers get torch's behaviour."""

    def unscale_(self, optimizer) -> None:
        if isinstance(optimizer, _DistirOptimizer):
            raise InputRejected(
                f"{type(optimizer).__name__}: unscale_ is not needed, the optimizer unscales the gradients inside its collective "
                "(to clip them, pass clip_grad_norm= to the optimizer)"
            )
        super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        if not isinstance(optimizer, _DistirOptimizer) or not self._enabled:
            return super().step(optimizer, *args, **kwargs)
        from torch.amp.grad_scaler import OptState

        if "closure" in kwargs or args:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if not optimizer.loss_scaling:
            raise InputRejected(f"{type(optimizer).__name__}: make the optimizer with loss_scaling=True to step it with a GradScaler")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        scale = self._scale
        assert scale is not None
        with torch.no_grad():
            skipped = optimizer._step(float(1.0 / scale.double()))
        state["found_inf_per_device"] = {scale.device: torch.full((), 1.0 if skipped else 0.0, dtype=torch.float32, device=scale.device)}
        state["stage"] = OptState.STEPPED
        return None


# ======================================================================================
# Programs as custom ops
# ======================================================================================

_LIBRARY: Any = None
_OPS: dict[tuple, Any] = {}
_STEPS: dict[int, steps.Step] = {}
_OPS_LOCK = threading.Lock()
_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64, np.dtype(np.float16): torch.float16,
                 np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64, np.dtype(np.bool_): torch.bool}


class Compiled:
    """A distir program as this rank's callable over torch tensors: ``fn(*args)`` calls
    the ``torch.library`` custom op ``op`` (one node under ``torch.compile``) and returns
    the program's results in order (an in-place result is its argument tensor, updated).
    Arguments are this rank's buffers (``step.arguments`` gives their shapes)."""

    def __init__(self, program: Any, func: str | None = None, pipeline: str | None = None, comm: Any = None):
        comm = default_comm(comm)
        lowered = steps.compile(program, func, ranks=comm.size, pipeline=pipeline)
        self.step = steps.Step(lowered, comm)
        with _OPS_LOCK:
            self.handle = len(_STEPS)
            _STEPS[self.handle] = self.step
        self.op = _custom_op(self.step)

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.step.arguments):
            names = ", ".join(a.name for a in self.step.arguments)
            raise InputRejected(f"the program takes {len(self.step.arguments)} arguments ({names}), got {len(args)}")
        new = self.op(self.handle, *args)
        new = [new] if isinstance(new, torch.Tensor) else list(new or ())
        out = []
        for r in self.step.results:
            out.append(args[r.inplace] if r.inplace is not None else new.pop(0))
        return out[0] if len(out) == 1 else tuple(out)


@contextlib.contextmanager
def torch_threads_kept():
    """Keep torch's intra-op thread count across a distir step. Numba's parallel kernels
    that run on the calling thread set OpenMP's thread count for it (the OpenMP runtime
    torch shares), which torch then uses: a training script's ``torch.set_num_threads(1)``
    became 2 after the first clipped step, and torch's own bf16 backward summed in
    another order from then on."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


def compile(program: Any, func: str | None = None, pipeline: str | None = None, comm: Any = None) -> Compiled:
    """``program`` (a module or its text) with ``pipeline`` applied, as a torch custom op
    on this rank's communicator (``comm``: as the optimizers take it)."""
    return Compiled(program, func, pipeline, comm)


def _custom_op(step: steps.Step):
    """The ``distir::`` op of ``step``'s signature (defined once per signature; the
    first argument names the rank's step)."""
    with _OPS_LOCK:
        return _define_op(step)


def _define_op(step: steps.Step):
    global _LIBRARY
    key = (tuple((a.name, a.shape, a.dtype.str, a.inplace) for a in step.arguments), tuple((r.shape, r.dtype.str, r.inplace) for r in step.results))
    op = _OPS.get(key)
    if op is not None:
        return op
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("distir", "FRAGMENT")
    name = f"step{len(_OPS)}_{step.program.func.sym_name.data}"
    params = ["int handle"]
    for k, a in enumerate(step.arguments):
        if a.shape is None:
            params.append(f"{'int' if a.dtype.kind in 'iub' else 'float'} {a.name}")
        elif a.inplace is not None:
            params.append(f"Tensor(a{k}!) {a.name}")
        else:
            params.append(f"Tensor {a.name}")
    fresh = [r for r in step.results if r.inplace is None]
    ret = "()" if not fresh else "Tensor" if len(fresh) == 1 else "(" + ", ".join(["Tensor"] * len(fresh)) + ")"
    _LIBRARY.define(f"{name}({', '.join(params)}) -> {ret}")

    def impl(handle: int, *args):
        s = _STEPS[handle]
        bufs, problem = [], None
        for a, arg in zip(args, s.arguments):
            try:
                bufs.append(a.detach().contiguous().numpy() if isinstance(a, torch.Tensor) and arg.inplace is None
                            else a.detach().numpy() if isinstance(a, torch.Tensor) else a)
            except (TypeError, RuntimeError) as e:  # a dtype numpy lacks (bf16), a tensor off the CPU
                problem = f"argument '{arg.name}' must hold {arg.dtype}, got a torch {a.dtype} tensor on {a.device} ({e})"
                break
        if problem is not None:
            s.agree(problem)  # raises on every rank: the peers are in this call's agreement
        with torch_threads_kept():
            results = s(*bufs)
        outs = [torch.from_numpy(np.array(v, copy=True)) for v, r in zip(results, s.results) if r.inplace is None]
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def fake(handle: int, *args):
        like = next(a for a in args if isinstance(a, torch.Tensor))
        outs = [like.new_empty(r.shape or (), dtype=_TORCH_DTYPES[r.dtype]) for r in fresh]
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    _LIBRARY.impl(name, impl, "CPU")
    torch.library.register_fake(f"distir::{name}", fake, lib=_LIBRARY)
    op = _OPS[key] = getattr(torch.ops.distir, name).default
    return op
