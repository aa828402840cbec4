"""Data-parallel optimizer steps over a flat arena, as distir programs: what a framework
bridge (``pytorch.py``, a JAX one) hands to the per-rank step API (``runtime/step.py``).

The parameters of one dtype (of any number of parameter groups) are laid out in one flat
1-D **arena** per role: parameters ``p`` and gradients ``g`` whole on every rank (the
model's tensors are views of them), optimizer state (``m``, ``v``) sliced: rank r keeps
its block of the arena (DESIGN §2's blocks of ceil(n/ranks); the lowering lays the
arenas out padded where the ranks do not divide n, as for any program) (ZeRO-1). One step of the arena is one distir
program over it (``Spec`` says which), written as the traditional schedule (CoCoNet's
AR-Opt: an AllReduce that averages the gradients as DDP does, then the update as
``dist.map``s on the whole arena) and run with a pipeline, by default CoCoNet's fused
schedule ``fuse(RS-Opt-AG)`` (``fused_pipeline``): a fused all-reduce whose kernel
reduces this rank's block of the gradients from its peers, updates the block of the
parameters and state, and writes the new parameters into every peer's arena.

* Each group's hyperparameters are scalar arguments (``%lr_g0, %lr_g1, ...``); with
  several groups the arena holds each element's group id ``gid`` (i8, sliced like the
  state: a read-only argument ``slice-state`` slices) and the maps pick their scalars
  with ``arith.select``, so that every group shares one fused collective.
* Mixed precision (f16, bf16; CoCoNet's): f32 master weights ``master`` and f32 state,
  sliced; the average of the gradients (rounded once to their type) is cast up
  (``dist.cast``), the update runs on the master weights, and the parameters are the
  master weights cast down, gathered.
* Clipping and loss scaling: the squares of the (unscaled) averaged gradients are
  summed (``dist.reduce_tensor``, completed by one scalar all-reduce inside the fused
  collective); clipping scales the gradients by min(1, max_norm / (norm + 1e-6)) as
  ``torch.nn.utils.clip_grad_norm_`` does; loss scaling multiplies them by
  ``inv_scale`` first and keeps every value as it was when the norm is not finite. The
  step returns the norm.

The update's arithmetic follows ``torch.optim`` operation by operation (scalars computed
in double precision on the host, as torch computes them, then rounded to the arena's
type), so that the same data gives the same parameters:

=========  ===================================================================
``adam``   g' = g + l2·p;  m = m + w1·(g' − m)  (lerp);  v = v·β2 + (w2·g')·g'
           (addcmul);  p = p·decay + (−step_size·m) / (√v / √bc2 + eps)
           AdamW: l2 = 0, decay = 1 − lr·wd; Adam: l2 = wd, decay = 1
``sgd``    g' = g + l2·p;  m = m·μ + damp·g';  d = m (or g' + μ·m, Nesterov);
           p = p + (−lr)·d;  damp = 1 on the first step (torch clones g'), 1 − dampening after
``lamb``   m, v as Adam (no bias correction on the host side: bc1, bc2 as scalars);
           u = m̂ / (√v̂ + eps) + wd·p;  p = p − lr·(‖p‖/‖u‖)·u with the norms per
           parameter tensor (``segments``), 1 where a norm is 0
=========  ===================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.dialects import layout as dist_layout

KINDS = ("adam", "sgd", "lamb")
STATE = {"adam": ("m", "v"), "sgd": ("m",), "lamb": ("m", "v")}
SCALARS = {
    "adam": ("w1", "beta2", "w2", "l2", "decay", "bc2s", "eps", "nstep"),
    "sgd": ("mu", "damp", "l2", "nlr"),
    "lamb": ("w1", "beta2", "w2", "bc1", "bc2", "eps", "wd", "lr"),
}
HALF = ("f16", "bf16")
CLIP_EPS = 1e-6
"""Added to the norm before dividing, as ``torch.nn.utils.clip_grad_norm_`` does."""
F32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Spec:
    """What one arena's step computes (module doc).

    ``dtype``: of the parameters and gradients; f16 and bf16 get f32 master weights
    ``master`` and f32 state (CoCoNet's mixed precision: the gradients are averaged in f32
    inside the collective and rounded once, cast up, and the new parameters are the
    master weights rounded to ``dtype``). ``clip``: the averaged gradients are scaled to a
    global 2-norm of at most ``max_norm`` (the norm is summed from each rank's slice and
    completed by one scalar all-reduce). ``scaled``: the gradients carry a loss scale,
    undone by ``inv_scale``; a step whose gradients hold an inf or NaN (a non-finite
    norm) changes nothing, alike on every rank. With ``clip`` or ``scaled`` the step
    returns the global norm of the (unscaled) gradients."""

    kind: str
    dtype: str = "f32"
    nesterov: bool = False
    clip: bool = False
    scaled: bool = False

    @property
    def master(self) -> bool:
        return self.dtype in HALF

    @property
    def state_dtype(self) -> str:
        return "f32" if self.master else self.dtype

    @property
    def norm(self) -> bool:
        return self.clip or self.scaled

    def sliced(self, layout: Layout) -> tuple[str, ...]:
        """The arguments kept sliced by the fused schedule (ZeRO-1: state, master weights,
        the per-element group ids)."""
        return (("master",) if self.master else ()) + STATE[self.kind] + (("gid",) if layout.group_count > 1 else ())


def fused_pipeline(kind: str | Spec, layout: Layout | None = None) -> str:
    """CoCoNet's fuse(RS-Opt-AG) with the state sliced (ZeRO-1), as a ``-p`` string (LAMB:
    per tensor of ``layout``)."""
    spec = kind if isinstance(kind, Spec) else Spec(kind)
    if spec.kind == "lamb":
        assert layout is not None
        state = ",".join(f"{s}_t{i}" for i in range(len(layout.sizes)) for s in STATE["lamb"])
        return f"fuse-maps,split-allreduce,reorder-allgather,slice-state{{targets={state}}},fuse-allreduce"
    state = ",".join(spec.sliced(layout) if layout is not None else STATE[spec.kind])
    return (
        "fuse-maps,split-allreduce{targets=avg},reorder-allgather{targets=avg_ag},"
        f"slice-state{{targets={state}}},fuse-allreduce{{targets=avg_rs}}"
    )


SCHEDULES = {"fused": fused_pipeline, "ar": lambda kind, layout=None: "fuse-maps"}
"""Named schedules: ``fused`` (fuse(RS-Opt-AG), ZeRO-1) and ``ar`` (AR-Opt, every rank
updates the whole arena: state not sliced)."""


@dataclass(frozen=True)
class Layout:
    """Where each tensor of an arena lies. Tensor i holds elements ``offsets[i] ..
    offsets[i] + sizes[i]`` of the parameter and gradient arenas (of ``padded``
    elements; the padding stays 0) and belongs to parameter group ``groups[i]`` (whose
    hyperparameters it is updated with; all 0 when omitted).

    Sliced state: with ``per_tensor=False`` rank r keeps its block of the whole arena
    (``layout.dim_block``: ceil(total / ranks) elements, the last ranks fewer; its state
    arena holds the largest block); with ``per_tensor=True`` (LAMB, whose trust ratio needs
    each tensor's norms) every tensor's span is padded to a multiple of ``ranks`` and
    sliced on its own, and rank r keeps block r of each span, side by side."""

    sizes: tuple[int, ...]
    ranks: int
    per_tensor: bool = False
    groups: tuple[int, ...] = ()

    ALIGN = 16

    @property
    def group_count(self) -> int:
        return max(self.groups, default=0) + 1

    def group_of(self, i: int) -> int:
        return self.groups[i] if self.groups else 0

    @property
    def spans(self) -> tuple[int, ...]:
        """Elements each tensor takes in the arena (with its padding when per tensor)."""
        if not self.per_tensor:
            return self.sizes
        unit = self.ranks * self.ALIGN
        return tuple(max(unit, -(-n // unit) * unit) for n in self.sizes)

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.cumsum((0, *self.spans))[:-1])

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def elements(self) -> int:
        """Elements of the step program's tensors: the tensors side by side (the lowering
        pads the arenas where the ranks do not divide them: ``lowering/padding.py``, one
        mechanism for every program); per tensor, the padded spans."""
        return self.padded if self.per_tensor else self.total

    @property
    def padded(self) -> int:
        """Elements of the parameter and gradient arenas: per tensor, the spans; else the
        lowering's padded buffer (one block of ceil(total/ranks) per rank)."""
        if self.per_tensor:
            return sum(self.spans)
        return dist_layout.padded_extent(max(self.total, 1), [], [self.ranks])

    def local_span(self, i: int, rank: int) -> tuple[int, int, int, int]:
        """Tensor i's part of rank's slice of the state: (start, stop) in the rank's
        state arena and the same elements as (start, stop) in the tensor (empty when
        start == stop)."""
        if self.per_tensor:
            share = self.spans[i] // self.ranks
            base = self.offsets[i] // self.ranks
            a, b = rank * share, min((rank + 1) * share, self.sizes[i])
            if a >= b:
                return 0, 0, 0, 0
            return base, base + b - a, a, b
        lo, n = dist_layout.dim_block(self.total, [self.ranks], [rank])  # the rank's block (DESIGN §2)
        hi = lo + n
        a, b = self.offsets[i], self.offsets[i] + self.sizes[i]
        s, e = max(a, lo), min(b, hi)
        if s >= e:
            return 0, 0, 0, 0
        return s - lo, e - lo, s - a, e - a

    def group_ids(self) -> np.ndarray:
        """The group of every element of the arena (``gid``; padding: group 0)."""
        out = np.zeros(self.padded, _GID[self.group_count > 127])
        for i, (off, n) in enumerate(zip(self.offsets, self.sizes)):
            out[off : off + n] = self.group_of(i)
        return out


_GID = {False: np.int8, True: np.int32}


def program(kind: str | Spec, layout: Layout, dtype: str = "f32", nesterov: bool = False) -> str:
    """The AR-Opt text of one step of an arena (module doc): ``@step(%g, %p, [%master], state...,
    [%gid], scalars per group..., [%max_norm], [%inv_scale])`` over the arena, the
    parameters, master weights and state written in place; with ``clip``/``scaled`` one
    more result, the global norm of the averaged gradients."""
    spec = kind if isinstance(kind, Spec) else Spec(kind, dtype, nesterov)
    if spec.kind == "lamb":
        return _lamb_program(layout, spec.dtype)
    if spec.kind not in KINDS:
        raise ValueError(f"unknown optimizer '{spec.kind}' (known: {', '.join(KINDS)})")
    return _Writer(spec, layout).text()


class _Writer:
    """The AR-Opt text of an Adam or SGD step (``program``). Values are named; each has a
    type and an element type. A map's body reads tensor ``x`` as ``%x_``, a plain scalar
    argument ``a`` as ``%a_`` and a per-group scalar ``s`` as ``%s`` (written ``%h_s`` in
    the text; with several groups, picked by the element's group id ``%gid_`` through
    ``arith.select``)."""

    def __init__(self, spec: Spec, layout: Layout):
        self.spec, self.layout = spec, layout
        self.n = layout.elements
        self.f = spec.state_dtype
        self.groups = layout.group_count
        self.gid_type = "i32" if self.groups > 127 else "i8"
        self.types: dict[str, str] = {}
        self.elts: dict[str, str] = {}
        self.body: list[str] = []

    def tensor(self, elt: str, placement: str = "replicated") -> str:
        return f"!dist.tensor<{self.n}x{elt}, @world, [{placement}]>"

    def value(self, name: str, t: str, elt: str) -> None:
        self.types[name], self.elts[name] = t, elt

    def scalar(self, name: str) -> list[str]:
        """The argument names of per-group scalar ``name``: one per group."""
        return [name] if self.groups == 1 else [f"{name}_g{k}" for k in range(self.groups)]

    def map(self, results: Sequence[str], operands: Sequence[str], lines: Sequence[str], per_group: Sequence[str] = (), out_elt: str | None = None) -> None:
        """``%results = dist.map(operands..., [gid], per-group scalars...)`` whose body is
        ``lines`` ending in ``dist.yield`` of ``%r0, %r1, ...`` (one per result); the
        results take the first operand's type (element type ``out_elt``: the same)."""
        operands = list(operands)
        if self.groups > 1 and per_group:
            operands.append("gid")
        args = [a for s in per_group for a in self.scalar(s)]
        f = self.f
        pick: list[str] = []
        for s in per_group:
            names = self.scalar(s)
            acc = f"%{names[0]}_"
            for k in range(1, len(names)):
                pick += [
                    f"%{s}_c{k} = arith.constant {k} : {self.gid_type}",
                    f"%{s}_is{k} = arith.cmpi eq, %gid_, %{s}_c{k} : {self.gid_type}",
                    f"%{s}_p{k} = arith.select %{s}_is{k}, %{names[k]}_, {acc} : {f}",
                ]
                acc = f"%{s}_p{k}"
            pick.append(f"%h_{s} = arith.addf {acc}, %zero_ : {f}")  # names the pick (x + 0 is x)
        lines = [re.sub(rf"%({'|'.join(per_group)})(?!\w)", r"%h_\1", x) for x in lines] if per_group else list(lines)
        head = [f"%zero_ = arith.constant 0.0 : {f}"]
        first = self.types[operands[0]]
        elt = out_elt or self.elts[operands[0]]
        rtype = first.replace(f"x{self.elts[operands[0]]},", f"x{elt},") if first.startswith("!dist.tensor<") else first
        for r in results:
            self.value(r, rtype, elt)
        ins = ", ".join(f"%{x}" for x in [*operands, *args])
        in_types = ", ".join([self.types[x] for x in operands] + [f] * len(args))
        out_types = rtype if len(results) == 1 else "(" + ", ".join([rtype] * len(results)) + ")"
        bb = ", ".join([f"%{x}_: {self.elts[x]}" for x in operands] + [f"%{a}_: {f}" for a in args])
        yields = ", ".join(f"%r{k}" for k in range(len(results)))
        text = [*head, *pick, *lines, f"dist.yield {yields} : {', '.join([elt] * len(results))}"]
        self.body.append(
            f"  {', '.join('%' + r for r in results)} = dist.map({ins}) : ({in_types}) -> {out_types} {{\n"
            f"  ^bb0({bb}):\n" + "\n".join(f"    {x}" for x in text) + "\n  }"
        )

    def text(self) -> str:
        spec, f, dt = self.spec, self.f, self.spec.dtype
        S = f"!dist.tensor<{f}, @world, [replicated]>"
        args = [("g", self.tensor(dt, "local"), dt), ("p", self.tensor(dt), dt)]
        if spec.master:
            args.append(("master", self.tensor(f), f))
        args += [(s, self.tensor(f), f) for s in STATE[spec.kind]]
        if self.groups > 1:
            args.append(("gid", self.tensor(self.gid_type), self.gid_type))
        scalar_args = [a for s in SCALARS[spec.kind] for a in self.scalar(s)]
        scalar_args += (["max_norm"] if spec.clip else []) + (["inv_scale"] if spec.scaled else [])
        for name, t, elt in args:
            self.value(name, t, elt)
        for a in scalar_args:
            self.value(a, f, f)
        self.body.append(f"  %avg = coll.all_reduce avg %g : {self.types['g']} -> {self.types['p']}")
        self.value("avg", self.types["p"], dt)
        grad = "avg"
        if spec.master:  # the average, rounded once to the gradients' type, cast up
            self.body.append(f"  %avg32 = dist.cast %avg : {self.types['avg']} -> {self.tensor(f)}")
            self.value("avg32", self.tensor(f), f)
            grad = "avg32"
        if spec.scaled:  # undo the loss scale
            self.map(["unscaled"], [grad, "inv_scale"], [f"%r0 = arith.mulf %{grad}_, %inv_scale_ : {f}"])
            grad = "unscaled"
        extra: list[str] = []
        if spec.norm:  # the global norm: squares summed over the arena, one scalar all-reduce once sliced
            self.map(["sq"], [grad], [f"%r0 = arith.mulf %{grad}_, %{grad}_ : {f}"])
            self.body.append(f"  %ss = dist.reduce_tensor sum %sq dims [0] : {self.types['sq']} -> {S}")
            self.value("ss", S, f)
            lines = [f"%r0 = math.sqrt %ss_ : {f}"]
            outs = ["gnorm"]
            if spec.clip:  # torch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1
                lines += [
                    f"%one = arith.constant 1.0 : {f}",
                    f"%e = arith.constant {CLIP_EPS:.17e} : {f}",
                    f"%den = arith.addf %r0, %e : {f}",
                    f"%c = arith.divf %max_norm_, %den : {f}",
                    f"%small = arith.cmpf olt, %c, %one : {f}",
                    f"%r{len(outs)} = arith.select %small, %c, %one : {f}",
                ]
                outs.append("coef")
            if spec.scaled:  # 1 when every gradient is finite (the sum of squares is), else 0
                lines += [
                    f"%big = arith.constant {F32_MAX:.17e} : {f}",
                    f"%finite = arith.cmpf ole, %ss_, %big : {f}",
                    f"%one_ = arith.constant 1.0 : {f}",
                    f"%r{len(outs)} = arith.select %finite, %one_, %zero_ : {f}",
                ]
                outs.append("ok")
            self.map(outs, ["ss", *(["max_norm"] if spec.clip else [])], lines)
            extra = outs[1:]
        x = "master" if spec.master else "p"  # what the update reads and writes
        gv = f"%{grad}_"
        g2 = [f"%gc = arith.mulf {gv}, %coef_ : {f}"] if spec.clip else []
        g2 += [f"%lp = arith.mulf %l2, %{x}_ : {f}", f"%g2 = arith.addf {'%gc' if spec.clip else gv}, %lp : {f}"]

        def keep(new: str, old: str) -> list[str]:
            """``%r0``: the updated element ``new``, or ``old`` when the step is skipped."""
            if not spec.scaled:
                return [f"%r0 = arith.addf {new}, %zero_ : {f}"]
            return [f"%go = arith.cmpf one, %ok_, %zero_ : {f}", f"%r0 = arith.select %go, {new}, {old} : {f}"]

        if spec.kind == "adam":
            self.map(["m1"], ["m", grad, x, *extra], [*g2, f"%d = arith.subf %g2, %m_ : {f}", f"%s = arith.mulf %w1, %d : {f}", f"%n = arith.addf %m_, %s : {f}", *keep("%n", "%m_")], ["w1", "l2"])
            self.map(["v1"], ["v", grad, x, *extra], [*g2, f"%a = arith.mulf %v_, %beta2 : {f}", f"%b = arith.mulf %w2, %g2 : {f}", f"%c = arith.mulf %b, %g2 : {f}", f"%n = arith.addf %a, %c : {f}", *keep("%n", "%v_")], ["beta2", "w2", "l2"])
            update = [
                f"%pd = arith.mulf %{x}_, %decay : {f}",
                f"%s = math.sqrt %v1_ : {f}",
                f"%q = arith.divf %s, %bc2s : {f}",
                f"%den = arith.addf %q, %eps : {f}",
                f"%num = arith.mulf %nstep, %m1_ : {f}",
                f"%u = arith.divf %num, %den : {f}",
                f"%n = arith.addf %pd, %u : {f}",
                *keep("%n", f"%{x}_"),
            ]
            self.map([f"{x}1"], [x, "m1", "v1", *(["ok"] if spec.scaled else [])], update, ["decay", "bc2s", "eps", "nstep"])
            returned = [f"{x}1", "m1", "v1"]
        else:
            d = [f"%nm = arith.mulf %mu, %m1_ : {f}", f"%dd = arith.addf %g2, %nm : {f}"] if spec.nesterov else []
            self.map(["m1"], ["m", grad, x, *extra], [*g2, f"%a = arith.mulf %m_, %mu : {f}", f"%b = arith.mulf %damp, %g2 : {f}", f"%n = arith.addf %a, %b : {f}", *keep("%n", "%m_")], ["mu", "damp", "l2"])
            update = [*g2, *d, f"%u = arith.mulf %nlr, {'%dd' if spec.nesterov else '%m1_'} : {f}", f"%n = arith.addf %{x}_, %u : {f}", *keep("%n", f"%{x}_")]
            self.map([f"{x}1"], [x, "m1", grad, *extra], update, ["mu", "l2", "nlr"])
            returned = [f"{x}1", "m1"]
        if spec.master:  # the new parameters: the master weights rounded to their type
            self.body.append(f"  %p1 = dist.cast %master1 : {self.types['master1']} -> {self.types['p']}")
            self.value("p1", self.types["p"], dt)
            returned = ["p1", *returned]
        index = {name: i for i, (name, _, _) in enumerate(args)}
        results = [f"{self.types[r]} {{dist.inplace = {index[r.removesuffix('1')]} : i64}}" for r in returned]
        if spec.norm:
            returned.append("gnorm")
            results.append(S)
        sig = [f"%{name}: {t}" for name, t, _ in args] + [f"%{a}: {f}" for a in scalar_args]
        return (
            "dist.mesh @world shape = [?]\n\n"
            f"func.func @{spec.kind}_step({', '.join(sig)})\n    -> ({', '.join(results)}) {{\n"
            + "\n".join(self.body)
            + f"\n  func.return {', '.join('%' + r for r in returned)} : {', '.join(self.types[r] for r in returned)}\n}}\n"
        )


def _lamb_program(layout: Layout, dtype: str) -> str:
    """AR-LAMB over every tensor of the arena (its padded span of the arenas): one
    all-reduce, the moments and the update direction, the two norms and the update per
    tensor; arguments ``g_i, p_i, m_i, v_i`` per tensor, then the scalars of each group
    (tensor i is updated with those of its group)."""
    f = dtype
    args: list[str] = []
    body: list[str] = []
    results: list[str] = []
    returned: list[str] = []
    groups = layout.group_count

    def names(k: int) -> list[str]:
        return [s if groups == 1 else f"{s}_g{k}" for s in SCALARS["lamb"]]

    for i, n in enumerate(layout.spans):
        T = f"!dist.tensor<{n}x{f}, @world, [replicated]>"
        L = f"!dist.tensor<{n}x{f}, @world, [local]>"
        S = f"!dist.tensor<{f}, @world, [replicated]>"
        base = len(args)
        args += [f"%g_t{i}: {L}", f"%p_t{i}: {T}", f"%m_t{i}: {T}", f"%v_t{i}: {T}"]
        w1, b2, w2, bc1, bc2, eps, wd, lr = names(layout.group_of(i))
        sc = ", ".join(f"%{x}" for x in (w1, b2, w2, bc1, bc2, eps, wd))
        sct = ", ".join([f] * 7)
        body += [
            f"%avg_t{i} = coll.all_reduce avg %g_t{i} : {L} -> {T}",
            f"%m1_t{i}, %v1_t{i}, %u_t{i} = dist.map(%m_t{i}, %v_t{i}, %avg_t{i}, %p_t{i}, {sc}) : ({T}, {T}, {T}, {T}, {sct}) -> ({T}, {T}, {T}) {{",
            f"^bb0(%m_: {f}, %v_: {f}, %g_: {f}, %p_: {f}, %w1_: {f}, %b2_: {f}, %w2_: {f}, %bc1_: {f}, %bc2_: {f}, %eps_: {f}, %wd_: {f}):",
            f"  %d = arith.subf %g_, %m_ : {f}",
            f"  %s = arith.mulf %w1_, %d : {f}",
            f"  %mn = arith.addf %m_, %s : {f}",
            f"  %a = arith.mulf %v_, %b2_ : {f}",
            f"  %b = arith.mulf %w2_, %g_ : {f}",
            f"  %c = arith.mulf %b, %g_ : {f}",
            f"  %vn = arith.addf %a, %c : {f}",
            f"  %mh = arith.divf %mn, %bc1_ : {f}",
            f"  %vh = arith.divf %vn, %bc2_ : {f}",
            f"  %r = math.sqrt %vh : {f}",
            f"  %den = arith.addf %r, %eps_ : {f}",
            f"  %q = arith.divf %mh, %den : {f}",
            f"  %wp = arith.mulf %wd_, %p_ : {f}",
            f"  %u_ = arith.addf %q, %wp : {f}",
            f"  dist.yield %mn, %vn, %u_ : {f}, {f}, {f}",
            "}",
            f"%pp_t{i}, %uu_t{i} = dist.map(%p_t{i}, %u_t{i}) : ({T}, {T}) -> ({T}, {T}) {{",
            f"^bb0(%p_: {f}, %u_: {f}):",
            f"  %a = arith.mulf %p_, %p_ : {f}",
            f"  %b = arith.mulf %u_, %u_ : {f}",
            f"  dist.yield %a, %b : {f}, {f}",
            "}",
            f"%pn_t{i} = dist.reduce_tensor sum %pp_t{i} dims [0] : {T} -> {S}",
            f"%un_t{i} = dist.reduce_tensor sum %uu_t{i} dims [0] : {T} -> {S}",
            f"%p1_t{i} = dist.map(%p_t{i}, %u_t{i}, %pn_t{i}, %un_t{i}, %{lr}) : ({T}, {T}, {S}, {S}, {f}) -> {T} {{",
            f"^bb0(%p_: {f}, %u_: {f}, %pn_: {f}, %un_: {f}, %lr_: {f}):",
            f"  %zero = arith.constant 0.0 : {f}",
            f"  %one = arith.constant 1.0 : {f}",
            f"  %a = math.sqrt %pn_ : {f}",
            f"  %b = math.sqrt %un_ : {f}",
            f"  %ratio = arith.divf %a, %b : {f}",
            f"  %pz = arith.cmpf ogt, %pn_, %zero : {f}",
            f"  %uz = arith.cmpf ogt, %un_, %zero : {f}",
            "  %both = arith.andi %pz, %uz : i1",
            f"  %trust = arith.select %both, %ratio, %one : {f}",
            f"  %k = arith.mulf %lr_, %trust : {f}",
            f"  %s = arith.mulf %k, %u_ : {f}",
            f"  %r = arith.subf %p_, %s : {f}",
            f"  dist.yield %r : {f}",
            "}",
        ]
        for k, role in enumerate(("p1", "m1", "v1")):
            results.append(f"{T} {{dist.inplace = {base + 1 + k} : i64}}")
            returned.append(f"%{role}_t{i}")
    args += [f"%{x}: {f}" for j in range(len(SCALARS["lamb"])) for x in [names(k)[j] for k in range(groups)]]
    ret_types = ", ".join(r.split(" {")[0] for r in results)
    return (
        "dist.mesh @world shape = [?]\n\n"
        f"func.func @lamb_step({', '.join(args)})\n    -> ({', '.join(results)}) {{\n"
        + "\n".join(f"  {line}" for line in body)
        + f"\n  func.return {', '.join(returned)} : {ret_types}\n}}\n"
    )


def scalars(kind: str, group: Mapping, step: int, first: bool = False) -> list[float]:
    """The scalar arguments of one step of ``kind`` for a group's hyperparameters (torch's
    names: lr, betas, eps, weight_decay, momentum, dampening) at step ``step`` (from 1),
    computed as torch computes them (module doc). ``group["decoupled"]`` marks AdamW."""
    lr = float(group["lr"])
    wd = float(group.get("weight_decay", 0.0))
    if kind == "adam":
        beta1, beta2 = (float(b) for b in group["betas"])
        bc1 = 1 - beta1**step
        bc2 = 1 - beta2**step
        decoupled = bool(group.get("decoupled", False))
        return [1 - beta1, beta2, 1 - beta2, 0.0 if decoupled else wd, 1 - lr * wd if decoupled else 1.0, bc2**0.5, float(group["eps"]), -(lr / bc1)]
    if kind == "sgd":
        mu = float(group.get("momentum", 0.0))
        damp = 1.0 if (first or mu == 0) else 1 - float(group.get("dampening", 0.0))
        return [mu, damp, wd, -lr]
    if kind == "lamb":
        beta1, beta2 = (float(b) for b in group["betas"])
        return [1 - beta1, beta2, 1 - beta2, 1 - beta1**step, 1 - beta2**step, float(group["eps"]), wd, lr]
    raise ValueError(f"unknown optimizer '{kind}'")


def arguments(kind: str, groups: Sequence[Sequence[float]]) -> list[float]:
    """The scalar arguments of a step in the program's order (each scalar, then the next,
    one value per group) from ``scalars`` of each group."""
    return [values[j] for j in range(len(SCALARS[kind])) for values in groups]


def resolve_schedule(spec: Spec, schedule: str | None, layout: Layout) -> str:
    """The ``-p`` pipeline of a schedule name (``SCHEDULES``), a pipeline string as given,
    or for ``auto`` (``auto:TOPOLOGY``) the tuner's pick for this arena (``auto_schedule``)."""
    if schedule is None or schedule in SCHEDULES:
        return SCHEDULES[schedule or "fused"](spec, layout)
    if schedule == "auto" or schedule.startswith("auto:"):
        return auto_schedule(spec, layout, schedule.partition(":")[2] or None)
    return schedule


def auto_schedule(spec: Spec, layout: Layout, topology: str | None = None) -> str:
    """The pipeline the autotuner's cost model predicts fastest for this arena, slicing only
    the optimizer state (and master weights), on ``topology`` (a built-in name or TOML
    file); by default the ``local`` topology when ``distir-tune --calibrate`` has measured
    this machine, else the fused schedule. LAMB (one fused collective per tensor) keeps its
    fused schedule."""
    if spec.kind == "lamb":
        return fused_pipeline(spec, layout)
    from distir.dialects.context import parse_module
    from distir.dialects.diagnostics import InputRejected
    from distir.tuning.topology import get_topology
    from distir.tuning.tuner import tune

    try:
        model = get_topology(topology or "local")
    except InputRejected:
        if topology:
            raise
        return fused_pipeline(spec, layout)
    module = parse_module(program(spec, layout))
    state = tuple(x for x in spec.sliced(layout) if x != "gid")  # the tuner slices in-place state only
    result = tune(module, ranks=layout.ranks, model=model, as_slice=state, jobs=1)
    best = result.best.get(result.dim)
    return result.by_name(best).pipeline if best else fused_pipeline(spec, layout)


_PROGRAMS: dict[tuple[str, int, str], Any] = {}


def compiled(text: str, ranks: int, pipeline: str):
    """``step.compile`` of a generated program, once per (text, ranks, pipeline)."""
    from distir.runtime import step

    key = (text, ranks, pipeline)
    program = _PROGRAMS.get(key)
    if program is None:
        program = _PROGRAMS[key] = step.compile(text, ranks=ranks, pipeline=pipeline)
    return program


def agreed_schedule(spec: Spec, schedule: str | None, layout: Layout, comm: Any) -> str:
    """``resolve_schedule`` alike on every rank: ``auto`` is decided on rank 0 and
    broadcast (collective)."""
    from distir.runtime.streams import SyncStream

    if not (schedule or "").startswith("auto") or comm.size == 1:
        return resolve_schedule(spec, schedule, layout)
    buf = np.zeros(4096, np.uint8)
    if comm.rank == 0:
        text = resolve_schedule(spec, schedule, layout).encode()
        buf[: len(text)] = np.frombuffer(text, np.uint8)
    comm.broadcast(buf, buf, buf.size, 0, SyncStream(0))
    return bytes(buf).rstrip(b"\0").decode()


class ArenaGroup:
    """The tensors of one arena (one dtype, any number of parameter groups) and its step
    (module doc), on numpy arrays: ``g``, ``p`` (whole) and ``state`` (the master weights
    first when there are any, then the optimizer state: this rank's slices when
    ``sliced``), allocated where the communicator's peers see them
    (``Step.empty_together``). A framework bridge makes its tensors views of them."""

    def __init__(self, spec: Spec, sizes: Sequence[int], comm: Any, schedule: str | None = None, groups: Sequence[int] = ()):
        from distir.runtime import step

        self.spec = spec
        self.kind = spec.kind
        self.rank = comm.rank
        self.layout = Layout(tuple(sizes), comm.size, per_tensor=spec.kind == "lamb", groups=tuple(groups) if any(groups) else ())
        self.pipeline = agreed_schedule(spec, schedule, self.layout, comm)
        self.step = step.Step(compiled(program(spec, self.layout), comm.size, self.pipeline), comm)
        names = [a.name for a in self.step.arguments if a.shape is not None]
        roles = [r for r in ("g", "p", "master", *STATE[spec.kind], "gid") if any(n == r or n.startswith(r + "_t") for n in names)]
        views: dict[str, np.ndarray] = {}
        arenas: dict[str, np.ndarray] = {}
        for role in roles:
            mine = [n for n in names if n == role or n.startswith(role + "_t")]
            arenas[role], parts = self.step.empty_together(mine)
            views.update(zip(mine, parts))
        self.buffers = [views[n] for n in names]
        self.g, self.p = arenas["g"], arenas["p"]
        self.state = [arenas[s] for s in (("master",) if spec.master else ()) + STATE[spec.kind]]
        self.sliced = bool(self.state) and self.state[-1].size != self.p.size
        if "gid" in arenas:
            ids = self.layout.group_ids()
            n = arenas["gid"].size
            arenas["gid"][...] = ids[:n] if n >= self.layout.total else ids[self.rank * n : (self.rank + 1) * n]
        # every rank's state arenas, where this rank can read them (shared memory); None:
        # gathering the state is collective (``gather_state``)
        self.peers = self.step.comm.peer_buffers(self.state) if self.sliced else None

    @property
    def gathers_alone(self) -> bool:
        """Whether ``gather_state`` needs no collective (one rank may call it alone)."""
        return not self.sliced or self.peers is not None

    def broadcast_parameters(self, root: int = 0) -> None:
        """Rank ``root``'s parameter arena on every rank (collective), as DDP broadcasts
        rank 0's parameters at construction."""
        from distir.runtime.streams import SyncStream

        if self.step.comm.size > 1:
            self.step.comm.broadcast(self.p, self.p, self.p.size, root, SyncStream(0))

    def span(self, i: int) -> tuple[int, int]:
        """(offset, size) of tensor i in the parameter and gradient arenas."""
        return self.layout.offsets[i], self.layout.sizes[i]

    def state_slice(self, k: int, i: int) -> np.ndarray:
        """This rank's part of state ``k`` of tensor ``i`` (1-D, a view; empty when none)."""
        if not self.sliced:
            off, n = self.span(i)
            return self.state[k][off : off + n]
        a, b, _, _ = self.layout.local_span(i, self.rank)
        return self.state[k][a:b]

    def element_span(self, i: int) -> tuple[int, int]:
        """The elements (start, stop) of tensor ``i`` (flat) whose state this rank holds."""
        if not self.sliced:
            return 0, self.layout.sizes[i]
        _, _, a, b = self.layout.local_span(i, self.rank)
        return a, b

    def gather_state(self, k: int) -> np.ndarray:
        """State ``k`` of every rank, side by side: read from the peers' arenas where
        they are shared (``gathers_alone``), else collective (when it is sliced)."""
        if not self.sliced:
            return self.state[k]
        if self.peers is not None:
            return np.concatenate([row[k].reshape(-1) for row in self.peers])
        from distir.runtime.streams import SyncStream

        full = np.zeros(self.layout.padded, self.state[k].dtype)
        self.step.comm.all_gather(self.state[k], full, self.state[k].size, SyncStream(0))
        return full

    def tensor_of(self, full: np.ndarray, i: int) -> np.ndarray:
        """Tensor i's elements of a gathered state (``gather_state``)."""
        lay = self.layout
        if not self.sliced or not lay.per_tensor:
            return full[lay.offsets[i] : lay.offsets[i] + lay.sizes[i]]
        n = lay.ranks
        blocks = full.reshape(n, -1)  # rank r's slice of every tensor, side by side
        base, share = lay.offsets[i] // n, lay.spans[i] // n
        return blocks[:, base : base + share].reshape(-1)[: lay.sizes[i]]

    def load_state(self, k: int, i: int, values: np.ndarray | None) -> None:
        """Set this rank's part of state ``k`` of tensor ``i`` from the tensor's whole
        state (flat; None: zeros)."""
        mine = self.state_slice(k, i)
        if values is None:
            mine[...] = 0
            return
        a, b = self.element_span(i)
        mine[...] = values[a:b]

    def run(self, scalars: Sequence[float], keep: Sequence[int] = (), absent: Sequence[int] = ()) -> float | None:
        """One step of the arena; the tensors in ``keep`` (skipped: no gradient, or
        another step count) keep their parameters and state, and those in ``absent`` (no
        gradient) count as zero gradients (in the norm). Returns the global norm of the
        averaged gradients when the step computes it (``Spec.norm``), else None."""
        for i in absent:
            off, n = self.span(i)
            self.g[off : off + n] = 0
        saved = []
        for i in keep:
            off, n = self.span(i)
            saved.append((i, self.p[off : off + n].copy(), [self.state_slice(k, i).copy() for k in range(len(self.state))]))
        out = self.step.run(*self.buffers, *scalars)
        for i, p, st in saved:
            off, n = self.span(i)
            self.p[off : off + n] = p
            for k, s in enumerate(st):
                self.state_slice(k, i)[...] = s
        return float(np.asarray(out[-1])) if self.spec.norm else None


def boxes(shape: Sequence[int], start: int, stop: int) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """The elements ``start .. stop`` of a row-major tensor of ``shape`` (flat indices) as
    boxes (offsets, sizes, flat index of the box's first element): at most one partial
    row at each end per dim, the full rows between as one box. A rank's slice of a
    tensor's state is a flat range; a checkpoint stores boxes (``torch.distributed.
    checkpoint``'s chunks)."""
    if start >= stop:
        return []
    if not shape:
        return [((), (), start)]
    inner = int(np.prod(shape[1:], dtype=np.int64))
    if inner == 0:
        return []
    first, last = start // inner, (stop - 1) // inner
    if first == last:  # within one row: the boxes of that row, one dim lower
        return [((first, *o), (1, *z), at) for o, z, at in boxes(shape[1:], start - first * inner, stop - first * inner) for at in [at + first * inner]]
    out = []
    lo = -(-start // inner)  # the first full row
    hi = stop // inner  # after the last full row
    if start < lo * inner:
        out += boxes(shape, start, lo * inner)
    if lo < hi:
        out.append(((lo, *[0] * (len(shape) - 1)), (hi - lo, *shape[1:]), lo * inner))
    if hi * inner < stop:
        out += boxes(shape, hi * inner, stop)
    return out


def state_bytes(arrays: Sequence[np.ndarray]) -> int:
    """Bytes held by this rank's optimizer state arrays."""
    return int(sum(a.nbytes for a in arrays))
