"""distir inside PyTorch (DESIGN §6): distributed optimizers with the ``torch.optim``
contract, and distir programs as ``torch.library`` custom ops.

**Optimizers** ``Adam``, ``AdamW``, ``SGD`` (and ``LAMB``) take torch's arguments plus
``schedule=`` and ``comm=``, and replace DDP's gradient all-reduce plus the update with
one distir step per parameter group (``frameworks/optimizers.py``)::

    model = GPT(...)                                   # no DDP wrapper
    opt = distir.frameworks.pytorch.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for x, y in batches:                               # this rank's shard of the data
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()                                     # average the gradients + AdamW

At construction every parameter's data moves into its group's parameter arena and its
``.grad`` becomes a view of the gradient arena (``p.data`` and ``p.grad`` stay tensors of
the parameter's shape: the model sees no difference); backward accumulates into the
arena in place, and ``step()`` runs the fused collective on the arenas themselves: no
per-step packing copy. The arenas live where the communicator shares memory (the MPI-3
window under ``mpiexec``, shared-memory segments under ``torchrun``), so the fused
all-reduce is zero-copy. Optimizer state is sliced (ZeRO-1): ``optimizer.state[p]``
holds this rank's slice of ``exp_avg``/``exp_avg_sq``/``momentum_buffer`` as 1-D tensors;
``state_dict()`` (collective) returns the full state in torch's format, which
``torch.optim.AdamW.load_state_dict`` takes, and ``load_state_dict`` takes torch's.

``zero_grad()`` sets ``.grad`` to None as torch does; the next backward's gradient then
moves into the arena (one copy, in a post-accumulate-grad hook, instead of a zeroed arena
plus an accumulation), and later backwards accumulate into it in place. A parameter whose
``.grad`` is None at ``step()`` is skipped, as torch skips it (every rank must agree on
which: the ranks run the same steps). A ``.grad`` replaced by another tensor of the right
shape and type is copied into the arena.

``comm=``: a ``torch.distributed`` ProcessGroup, a runtime communicator (``runtime/step.py``:
``local_comms``, ``mpi_comm``), or None: the default process group when one is
initialized, else MPI's ``COMM_WORLD`` when started by ``mpiexec``, else one rank.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np

from distir.dialects.diagnostics import InputRejected, require_extra
from distir.frameworks import optimizers as core
from distir.runtime import step as steps

torch = require_extra("torch", "torch", "distir.frameworks.pytorch")

_DTYPES = {torch.float32: "f32", torch.float64: "f64"}


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


class _Group:
    """One parameter group: its arenas and step (``optimizers.ArenaGroup``, numpy) and the
    torch views the model sees (``p.data``, ``p.grad``, ``optimizer.state[p]``). Made on
    every rank at once (collective): the parameters move into the arena and rank 0's
    values are broadcast, as DDP does at construction."""

    def __init__(self, kind: str, params: list[torch.Tensor], comm: Any, schedule: str | None, nesterov: bool):
        self.dtype = dtype = params[0].dtype
        self.params = params
        self.shapes = [tuple(p.shape) for p in params]
        self.arena = core.ArenaGroup(kind, [p.numel() for p in params], _DTYPES[dtype], comm, schedule, nesterov)
        self.g_t = torch.from_numpy(self.arena.g)
        self.p_t = torch.from_numpy(self.arena.p)
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

    @staticmethod
    def problem(gi: int, params: list[torch.Tensor]) -> str | None:
        """What makes ``params`` (group ``gi``) unfit for one arena, or None (local: no
        communication)."""
        seen: dict[int, int] = {}
        for i, p in enumerate(params):
            if id(p) in seen:
                return (
                    f"parameter {i} of group {gi} is parameter {seen[id(p)]} again: pass each parameter once "
                    "(torch.optim warns that this will be an error; it updates such a parameter twice per step)"
                )
            seen[id(p)] = i
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            names = ", ".join(sorted(str(d) for d in dtypes))
            return f"a parameter group mixes dtypes ({names}): put each dtype in a group of its own"
        if dtypes and next(iter(dtypes)) not in _DTYPES:
            return f"parameters of dtype {next(iter(dtypes))} are not supported (float32, float64)"
        return None

    @property
    def pipeline(self) -> str:
        return self.arena.pipeline

    def adopt(self, i: int) -> None:
        """Tensor i's values into the parameter arena, its ``.data`` a view of it."""
        p = self.params[i]
        off, n = self.arena.span(i)
        with torch.no_grad():
            view = self.p_t[off : off + n].view(self.shapes[i])
            view.copy_(p.detach())
            p.data = view
        if len(self.param_ptrs) <= i:
            self.param_ptrs.append(view.data_ptr())
        self.param_ptrs[i] = view.data_ptr()

    def rebound(self, gi: int) -> tuple[list[int], str | None]:
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
                    f"parameter {i} of group {gi} (shape {list(self.shapes[i])}) was rebound after the optimizer was made "
                    f"to a {p.layout} {p.dtype} tensor of shape {list(p.shape)} on {p.device}: rebind it to a tensor of its shape and dtype, "
                    "or make a new optimizer"
                )
            self.adopt(i)
            moved.append(i)
        return moved, None

    def grad_view(self, i: int) -> torch.Tensor:
        """A new view of tensor i's part of the gradient arena."""
        off, n = self.arena.span(i)
        return self.g_t[off : off + n].view(self.params[i].shape)

    def state_view(self, k: int, i: int) -> torch.Tensor:
        """This rank's slice of state ``k`` of tensor ``i`` (1-D; empty when none)."""
        return torch.from_numpy(self.arena.state_slice(k, i))


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


class _DistirOptimizer(torch.optim.Optimizer):
    """The ``torch.optim.Optimizer`` contract over distir steps (module doc).

    Every collective method (construction, ``step``, ``state_dict`` when the ranks share
    no memory) begins with one agreement of the ranks (``steps.agree``): a problem on any
    rank, or ranks that differ in what shapes the step (the parameter groups, their
    options, the schedule; at ``step()`` which parameters have gradients, the backward
    passes since the last step, the hyperparameters, the parameters rebound), raises
    ``InputRejected`` on every rank; an error after it, in the middle of collectives,
    aborts the job through the communicator (``comm.abort``): no rank waits forever."""

    kind = ""
    state_names: tuple[str, ...] = ()
    exports_step = True
    """Whether ``state_dict`` has a ``step`` per parameter (torch's SGD has none)."""

    def __init__(self, params: Iterable, defaults: dict, schedule: str | None = None, comm: Any = None, nesterov: bool = False,
                 problem: str | None = None):
        self._wrapped = False
        self.comm = default_comm(comm)
        self.schedule = schedule
        try:
            super().__init__(params, defaults)
        except (TypeError, ValueError) as e:  # torch's checks of the groups: reported on every rank
            problem = problem or str(e)
            self.param_groups = []
        self._check_same_groups(problem)
        self._groups: list[_Group] = []
        self._where: dict[int, tuple[_Group, int]] = {}
        self._hooks = []
        with self._collective("building the optimizer"):
            for group in self.param_groups:
                self._groups.append(_Group(self.kind, list(group["params"]), self.comm, schedule, nesterov))
            for gi, (group, g) in enumerate(zip(self.param_groups, self._groups)):
                for i, p in enumerate(g.params):
                    self._where[id(p)] = (g, i)
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._arrived))
                    st = self.state[p]
                    st["step"] = torch.tensor(0.0)
                    for k, name in enumerate(self.state_names):
                        st[name] = g.state_view(k, i)
        self._wrapped = True

    def _check_same_groups(self, problem: str | None = None) -> None:
        """Collective: every rank must wrap the same parameter groups (their tensors'
        shapes and dtypes, which are frozen, their options) with the same schedule, and
        none may have a ``problem`` (or one found here: options distir does not
        implement, a group unfit for an arena); else every rank raises ``InputRejected``
        naming the ranks and what differs (``steps.agree``). At construction, and at
        each change of the groups."""
        if problem is None:
            problem = next((why for gi, group in enumerate(self.param_groups)
                            for why in (_flags_problem(group, f"group {gi}"), _Group.problem(gi, list(group["params"]))) if why), None)
        call = f"{type(self).__name__}.add_param_group(...)" if getattr(self, "_wrapped", False) else f"{type(self).__name__}(...)"
        fingerprint = {"the call": call, "schedule=": repr(self.schedule)}
        for gi, group in enumerate(self.param_groups):
            fingerprint[f"group {gi}"] = _describe(list(group["params"]))
            fingerprint[f"group {gi} options"] = _options(group)
        steps.agree(self.comm, problem and f"{type(self).__name__}: {problem}", fingerprint, WHAT)

    def _collective(self, what: str):
        """``with``: collectives the ranks agreed on; an error in them on this rank ends
        the job through the communicator (``comm.abort``), its peers would wait."""
        return _AbortOnError(self.comm, f"{type(self).__name__}: {what}")

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_wrapped", False):
            raise InputRejected(
                f"{type(self).__name__}: parameters cannot be added after wrapping (the arenas are laid out at construction): "
                "create the optimizer with every parameter group"
            )
        super().add_param_group(param_group)

    def _arrived(self, p: torch.Tensor) -> None:
        """After backward set ``p.grad``: a fresh gradient (``.grad`` was None, autograd
        gave it its own tensor) moves into the arena, one copy instead of a zeroed arena
        plus an accumulation; a gradient already in the arena was accumulated in place."""
        g, i = self._where[id(p)]
        g.arrivals[i] += 1
        grad = p.grad
        if grad is None or grad.layout != torch.strided or grad.data_ptr() == g.grad_ptrs[i] and grad.dtype == p.dtype:
            return  # (a sparse gradient: step() reports it, on every rank)
        if _bad_grad(grad, p) is None:
            view = g.grad_views[i]
            if view.data_ptr() != g.grad_ptrs[i]:
                view = g.grad_view(i)
            view.copy_(grad)
            p.grad = g.grad_views[i] = view
        # else: step() reports it, on every rank
    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        problem, plans, rebound = self._plan()
        backwards = max((max(g.arrivals, default=0) for g in self._groups), default=0)
        fingerprint = {
            "the call": "step()",
            "the parameters with gradients (and their step counts)": _plans_text(plans),
            "the backward passes since the last step() (a rank that skipped step() or ran another backward)": str(backwards),
            "the hyperparameters": " | ".join(_options(group) for group in self.param_groups),
            "the parameters rebound since the last step()": repr(rebound),
        }
        steps.agree(self.comm, problem, fingerprint, WHAT)
        with self._collective("step()"):
            for gi, g in enumerate(self._groups):
                if any(r[0] == gi for r in rebound):
                    g.arena.broadcast_parameters()
            for group, g, (cohorts, skipped) in zip(self.param_groups, self._groups, plans):
                self._run_group(group, g, cohorts, skipped)
        for g in self._groups:
            g.arrivals = [0] * len(g.params)
        return loss

    def _plan(self):
        """Per group: the parameters to update grouped by their step count (one run of the
        step each), the skipped ones; the parameters rebound since the last step (adopted
        again: ``_Group.rebound``); or what is wrong with them or their gradients."""
        plans = []
        rebound: list[tuple[int, int]] = []
        problem = None
        for gi, (group, g) in enumerate(zip(self.param_groups, self._groups)):
            if [id(p) for p in group["params"]] != [id(p) for p in g.params]:
                problem = f"{type(self).__name__}: the parameters of a group changed after wrapping: create a new optimizer"
                plans.append(({}, []))
                continue
            moved, why = g.rebound(gi)
            rebound += [(gi, i) for i in moved]
            problem = problem or why
            cohorts: dict[float, list[int]] = {}
            skipped: list[int] = []
            for i, p in enumerate(g.params):
                grad = p.grad
                if grad is None:
                    skipped.append(i)
                    continue
                if grad.layout != torch.strided or grad.data_ptr() != g.grad_ptrs[i] or grad.dtype != p.dtype:
                    why = _bad_grad(grad, p)
                    if why:
                        problem = f"parameter {i} of group {gi} (shape {list(p.shape)}): {why}"
                        continue
                    view = g.grad_view(i)
                    view.copy_(grad)
                    p.grad = g.grad_views[i] = view
                cohorts.setdefault(float(self.state[p]["step"]), []).append(i)
            plans.append((cohorts, skipped))
        return problem, plans, rebound

    def _run_group(self, group: dict, g: _Group, cohorts: dict[float, list[int]], skipped: list[int]) -> None:
        if not cohorts:
            return
        hyper = self._hyper(group)
        for count, members in cohorts.items():
            keep = skipped + [i for c, ms in cohorts.items() if c != count for i in ms]
            g.arena.run(core.scalars(self.kind, hyper, int(count) + 1, first=count == 0), keep)
            for i in members:
                self.state[g.params[i]]["step"] += 1

    def _hyper(self, group: dict) -> dict:
        return group

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad``: ``.grad`` becomes None (the next backward's gradients
        move into the arena, ``_arrived``), or with ``set_to_none=False`` the gradients
        that exist are zeroed in place (the arena; None ones stay None)."""
        for g in self._groups:
            if not set_to_none:
                g.arena.g.fill(0)
            for i, p in enumerate(g.params):
                if set_to_none or p.grad is None:
                    p.grad = None
                elif p.grad.data_ptr() != g.grad_ptrs[i]:
                    p.grad = g.grad_views[i] = g.grad_view(i)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The full state in ``torch.optim``'s format. Where the ranks share memory (rank
        threads, ``mpiexec`` or ``torchrun`` on one node) this rank reads its peers' state
        slices itself: it may be called on one rank alone (``if rank == 0:
        torch.save(opt.state_dict(), path)``). Elsewhere it is collective (every rank
        calls it; one that does not is found by the agreement, on every rank)."""
        if not all(g.arena.gathers_alone for g in self._groups):
            steps.agree(self.comm, None, {"the call": COLLECTIVE_STATE_DICT}, WHAT)
        with self._collective("state_dict()"):
            fulls = [[g.arena.gather_state(k) for k in range(len(g.arena.state))] for g in self._groups]
        sd = super().state_dict()
        index = 0
        for g, full in zip(self._groups, fulls):
            for i, p in enumerate(g.params):
                entry = {"step": self.state[p]["step"].clone()} if self.exports_step else {}
                for k, name in enumerate(self.state_names):
                    entry[name] = torch.from_numpy(g.arena.tensor_of(full[k], i).copy()).view(p.shape)
                sd["state"][index] = entry
                index += 1
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict of this optimizer or of ``torch.optim``'s (full state). It is
        checked whole before anything is loaded (``InputRejected``: another model's
        state, another optimizer's, options distir does not implement): every rank given
        the same dict loads it or rejects it alike. Not collective: every rank loads its
        own slices from the full state."""
        why = self._state_dict_problem(state_dict)
        if why:
            raise InputRejected(f"{type(self).__name__}.load_state_dict: {why}")
        super().load_state_dict(state_dict)
        for g in self._groups:
            for i, p in enumerate(g.params):
                st = self.state[p]
                # torch's SGD keeps no step count: a momentum buffer means "not the first step"
                step = st.get("step", torch.tensor(1.0 if st.get(self.state_names[0]) is not None else 0.0))
                new = {"step": torch.as_tensor(step, dtype=torch.float32).clone()}
                for k, name in enumerate(self.state_names):
                    full = st.get(name)
                    g.arena.load_state(k, i, None if full is None else full.detach().reshape(-1).numpy())
                    new[name] = g.state_view(k, i)
                self.state[p] = new

    def _state_dict_problem(self, sd: Any) -> str | None:
        """What makes ``sd`` unfit for this optimizer, or None."""
        if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict) or not isinstance(sd.get("param_groups"), list):
            return "not an optimizer state dict (a dict of 'state' and 'param_groups')"
        groups = sd["param_groups"]
        if len(groups) != len(self._groups):
            return f"the state dict has {len(groups)} parameter groups, the optimizer {len(self._groups)}"
        names = set(self.state_names) | {"step"}
        for gi, (saved, g) in enumerate(zip(groups, self._groups)):
            ids = list(saved.get("params", []))
            if len(ids) != len(g.params):
                return f"group {gi} of the state dict has {len(ids)} parameters, the optimizer's {len(g.params)}: it is another model's state"
            why = _flags_problem(saved, f"group {gi} of the state dict")
            if why:
                return why
            for i, (key, p) in enumerate(zip(ids, g.params)):
                st = sd["state"].get(key, {})
                other = sorted(set(st) - names)
                if other:
                    return (f"parameter {i} of group {gi} has state {other} in the state dict: it is another optimizer's state "
                            f"({type(self).__name__} keeps {sorted(names)})")
                for name in self.state_names:
                    t = st.get(name)
                    if t is not None and (not isinstance(t, torch.Tensor) or t.numel() != p.numel()):
                        size = t.numel() if isinstance(t, torch.Tensor) else type(t).__name__
                        return (f"'{name}' of parameter {i} of group {gi} has {size} elements in the state dict, the parameter "
                                f"{p.numel()} (shape {list(p.shape)}): it is another model's state")
        return None

    @property
    def pipelines(self) -> list[str]:
        """The ``-p`` pipeline each group's step was compiled with."""
        return [g.pipeline for g in self._groups]

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds."""
        return core.state_bytes([s for g in self._groups for s in g.arena.state])


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
    """Which parameters of each group have gradients, by step count (``_plan``)."""
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
    if grad.layout != torch.strided:
        return f"its gradient is sparse ({grad.layout}): distir's optimizers take dense gradients (nn.Embedding(sparse=False))"
    if grad.dtype != p.dtype:
        return f"its gradient is {grad.dtype}, the parameter {p.dtype}"
    if tuple(grad.shape) != tuple(p.shape):
        return f"its gradient has shape {list(grad.shape)}"
    if not grad.is_contiguous():
        return "its gradient is not contiguous"
    return None


def _torch_defaults(cls, kwargs: dict) -> tuple[dict, str | None]:
    """torch's own defaults and argument checks for ``cls`` (a torch.optim class): the
    defaults, or what torch rejected (reported by every rank's agreement)."""
    try:
        return dict(cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults), None
    except (TypeError, ValueError, RuntimeError) as e:
        return {}, str(e)


class AdamW(_DistirOptimizer):
    """``torch.optim.AdamW`` as one distir step per group (module doc)."""

    kind = "adam"
    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *, maximize=False,
                 schedule: str | None = None, comm: Any = None, **torch_kwargs):
        defaults, problem = _torch_defaults(
            self._torch_class(), dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize, **torch_kwargs)
        )
        super().__init__(params, defaults, schedule=schedule, comm=comm, problem=problem)

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
                 schedule: str | None = None, comm: Any = None, **torch_kwargs):
        defaults, problem = _torch_defaults(
            torch.optim.SGD, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov, maximize=maximize, **torch_kwargs)
        )
        super().__init__(params, defaults, schedule=schedule, comm=comm, nesterov=nesterov, problem=problem)


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
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay), schedule=schedule, comm=comm, problem=problem)


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
