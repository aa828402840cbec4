"""``plan-execution{target=NAME scattered=a,b}``: decide how a lowered program executes
on a target, and write every decision into the IR (``docs/planning.md``). It is the only
place that decides: the runtime executes what the attributes say, the cost model reads
them.

Identity: none is needed; the pass changes no value any op computes. Each decision only
picks how ops that mean the same thing run (a fused group's calls one by one or as one
kernel; a tile stored into a peer's buffer or sent to it; a copy with streaming stores
or plain ones). Validity: the module is lowered (``lower-collectives``) and not planned
yet (a planned module keeps its plan: planning it for another target is an error).

The rules, for ``target`` (``lowering/target.py``):

* ``rt.fused`` runs ``zero_copy`` when the target has shared memory, the group has the
  zero-copy shape (``FusedOp.zero_copy_layout``), it runs on stream 0 (the rank's
  thread: the kernel reads its peers' buffers while they wait), its reduction and the
  kernel's outputs are floats (f16 and bf16 included: CPU kernels read and write them
  in place as their bits), and no buffer it touches is a scattered argument (pieces are
  no single buffer a peer can index); ``sequential`` otherwise. On a target whose
  ranks may be given buffers their peers cannot see (every shared-memory target but
  ``local``'s threads: ``EVERY_BUFFER_SHARED``), the group is ``zero_copy .. else
  sequential``: a run over such buffers runs it sequentially (the runtime learns where
  the buffers are from the buffer exchange, alike on every rank); on ``local`` it is
  plain ``zero_copy`` and a run that breaks the promise fails.
* Fused tile operators get ``transport shared`` when the target has shared memory
  (``transport shared else messages`` where a run may give buffers the peers cannot
  see, as for zero-copy groups), ``transport messages`` otherwise.
* ``nccl.all_gather`` gets ``in_place`` when its input is this rank's block of its
  output (every target: NCCL and MPI take it as their in-place form too).
* Copies get ``stream_from N`` (the target's threshold) when the target streams: every
  ``rt.copy`` between contiguous buffers, and the collectives whose data the target's
  communicator copies on the host (``host_copies``), except the gathers of a zero-copy
  group (the kernel stores those element by element).
* The module gets ``rt.target``; the scattered arguments get ``{rt.scattered}``.

Before::

    rt.fused {
      nccl.reduce_scatter avg %g, %rs, %c, %s count 256 : ...
      %i = rt.group_rank @world axes [0] : index
      %pv = rt.block %p, %i dim 0 count 2 : (memref<512xf32>, index) -> memref<256xf32>
      rt.launch @k0(%rs, %pv, %lr, %s) : ...
      nccl.all_gather %pv, %p, %c, %s count 256 : ...
    }

after ``plan-execution{target=local}``::

    rt.fused zero_copy reduce 0 gather [1] {
      nccl.reduce_scatter avg %g, %rs, %c, %s count 256 : ...
      ...
      nccl.all_gather %pv, %p, %c, %s count 256 in_place : ...
    }

and after ``plan-execution{target=gpu}`` the same group is ``rt.fused sequential``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, DictionaryAttr, Float16Type, MemRefType, ModuleOp, UnitAttr, f32, f64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from distir.dialects import dist, nccl, rt
from distir.dialects.diagnostics import InputRejected
from distir.dialects.fast import walk
from distir.dialects.rt import TARGET, TargetAttr
from distir.lowering.common import fail
from distir.lowering.lower_collectives import ARENAS
from distir.lowering.target import EVERY_BUFFER_SHARED, get_target, planned_target

PASS = "plan-execution"
SCATTERED = "rt.scattered"
"""Argument attribute: the runtime passes this argument as a list of pieces."""

_FLOATS = (Float16Type(), BFloat16Type(), f32, f64)


# ======================================================================================
# Where a buffer comes from
# ======================================================================================


def root(v: SSAValue) -> SSAValue:
    """The buffer ``v`` is a view of (through ``rt.block`` and ``rt.view``)."""
    while True:
        owner = v.owner
        if isinstance(owner, rt.BlockOp):
            v = owner.args[0]
        elif isinstance(owner, rt.ViewOp):
            v = owner.buffer
        else:
            return v


def contiguous(v: SSAValue) -> bool:
    """Whether a buffer is one contiguous run of memory: arguments and allocations are,
    a view of a contiguous buffer is, a block is when it is a contiguous block of a
    contiguous buffer."""
    owner = v.owner
    if isinstance(v, BlockArgument) or isinstance(owner, rt.AllocOp):
        return True
    if isinstance(owner, rt.ViewOp):
        return contiguous(owner.buffer)
    if isinstance(owner, rt.BlockOp):
        parent = owner.args[0]
        return rt.BlockOp.contiguous(parent.type.get_shape(), owner.option("dim")) and contiguous(parent)  # type: ignore[attr-defined]
    return False


def scattered_arguments(f: func.FuncOp) -> set[SSAValue]:
    """The arguments of a lowered function passed as pieces: those marked
    ``{rt.scattered}`` and the arenas holding one of them."""
    marked = set()
    if f.arg_attrs is not None:
        for a, attrs in zip(f.body.block.args, f.arg_attrs.data):
            if SCATTERED in attrs.data:  # type: ignore[attr-defined]
                marked.add(a)
    return _with_arenas(f, marked)


def _with_arenas(f: func.FuncOp, pieces: set[SSAValue]) -> set[SSAValue]:
    """``pieces`` and the arenas (``rt.arenas``) holding one of them."""
    arenas = f.attributes.get(ARENAS)
    if arenas is not None and pieces:
        args = list(f.body.block.args)
        first = len(args) - len(arenas.data)  # type: ignore[attr-defined]
        for k, members in enumerate(arenas.data):  # type: ignore[attr-defined]
            if any(args[i] in pieces for i in members.get_values()):
                pieces.add(args[first + k])
    return pieces


def _stream_number(v: SSAValue) -> int | None:
    owner = v.owner
    return owner.number if isinstance(owner, rt.StreamOp) else None


def _element(v: SSAValue) -> Attribute | None:
    t = v.type
    return t.element_type if isinstance(t, MemRefType) else None


# ======================================================================================
# The decisions
# ======================================================================================


def zero_copy(op: rt.FusedOp, target: TargetAttr, scattered: set[SSAValue]) -> tuple[int, tuple[int, ...]] | None:
    """The zero-copy layout of a fused group on ``target``, or None when it runs
    sequentially (see the module doc)."""
    if not target.shared_memory:
        return None
    layout = op.zero_copy_layout()
    if isinstance(layout, str):
        return None
    rs = next(iter(op.body.block.ops))
    assert isinstance(rs, nccl.ReduceScatterOp)
    if _stream_number(rs.stream) != 0 or _element(rs.buffers[0]) not in _FLOATS:
        return None
    launch = next(o for o in op.body.block.ops if isinstance(o, rt.LaunchOp))
    kernel = _kernel(op, launch)
    stored = {o.memref for o in kernel.body.block.ops if isinstance(o, memref.StoreOp)}
    for p, a in zip(kernel.params, launch.args[:-1]):
        if p in stored and isinstance(a.type, MemRefType) and a.type.element_type not in _FLOATS:
            return None
    touched = [rs.buffers[0], *launch.args[:-1]]
    touched += [g.buffers[1] for g in op.body.block.ops if isinstance(g, nccl.AllGatherOp)]
    if any(isinstance(v.type, MemRefType) and root(v) in scattered for v in touched):
        return None
    return layout


def _kernel(op: Operation, launch: rt.LaunchOp) -> rt.KernelOp:
    from distir.dialects.dist import _lookup

    k = _lookup(op, launch.kernel)
    assert isinstance(k, rt.KernelOp)
    return k


def plan_function(f: func.FuncOp, target: TargetAttr) -> None:
    """Write the decisions for ``target`` into a lowered function (module doc)."""
    scattered = scattered_arguments(f)
    in_zero_copy: set[Operation] = set()
    falls_back = target.target_name not in EVERY_BUFFER_SHARED
    for op in f.walk():
        if isinstance(op, rt.FusedOp):
            layout = zero_copy(op, target, scattered)
            if layout is None:
                op.plan("sequential")
            else:
                op.plan("zero_copy", *layout, falls_back=falls_back)
                in_zero_copy.update(op.body.block.ops)
        elif isinstance(op, rt.TiledCollectiveOp):
            op.properties["transport"] = rt.TRANSPORT.to_attr("shared" if target.shared_memory else "messages")
            if target.shared_memory and falls_back:
                op.properties["else"] = rt.TRANSPORT_ELSE.to_attr("messages")
    stream_from = target.stream_from
    for op in walk(f):
        if isinstance(op, nccl.AllGatherOp) and rt.in_place_block(op.buffers[0], op.buffers[1], op.count, op.comm):
            op.properties["in_place"] = UnitAttr()
        if stream_from is None:
            continue
        if isinstance(op, rt.CopyOp):
            if contiguous(op.args[0]) and contiguous(op.args[1]):
                op.properties["stream_from"] = rt.STREAM_FROM.to_attr(stream_from)
        elif isinstance(op, nccl.NcclOp) and op.name.removeprefix("nccl.") in target.host_copies and op not in in_zero_copy:
            op.properties["stream_from"] = rt.STREAM_FROM.to_attr(stream_from)


def mark_scattered(f: func.FuncOp, names: Sequence[str]) -> None:
    """Mark the arguments called ``names`` as passed in pieces (``{rt.scattered}``)."""
    args = list(f.body.block.args)
    known = {a.name_hint: i for i, a in enumerate(args)}
    attrs = list(f.arg_attrs.data) if f.arg_attrs is not None else [DictionaryAttr({}) for _ in args]
    for name in names:
        i = known.get(name)
        if i is None:
            raise InputRejected(f"'{PASS}' pass: @{f.sym_name.data} has no argument '{name}' to scatter")
        attrs[i] = DictionaryAttr({**attrs[i].data, SCATTERED: UnitAttr()})
    f.arg_attrs = ArrayAttr(attrs)


@dataclass(frozen=True)
class PlanExecutionPass(ModulePass):
    """Decide how a lowered program executes on ``target`` (module doc); ``scattered``
    names the arguments the run passes as lists of pieces."""

    name = "plan-execution"

    target: str = "local"
    scattered: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get_target(self.target)
        done = planned_target(op)
        if done is not None:
            if done.target_name != target.target_name:
                fail(PASS, f"the module is planned for target '{done.target_name}' already; lower it again to plan it for '{target.target_name}'")
            return
        funcs = [f for f in op.ops if isinstance(f, func.FuncOp)]
        if any(isinstance(o, dist.MeshOp) or o.dialect_name() in ("dist", "coll") for f in funcs for o in walk(f)):
            fail(PASS, "the module is not lowered: run lower-collectives first (the default lowering pipeline does)")
        for f in funcs:
            if self.scattered:
                mark_scattered(f, self.scattered)
            plan_function(f, target)
        op.attributes[TARGET] = target


def plan(module: ModuleOp, target: str | TargetAttr, scattered: Sequence[str] = ()) -> None:
    """Plan a lowered ``module`` for ``target`` in place (``plan-execution``), unless it is
    planned already; then check that ``target`` can execute its plan."""
    from distir.passes.pipeline import run_passes

    t = get_target(target)
    if planned_target(module) is None:
        run_passes(module, [PlanExecutionPass(t.target_name, tuple(scattered))], Context())  # verified after, as every pass
        return
    check_executable(module, t, scattered)


# ======================================================================================
# Whether a runner can execute a plan
# ======================================================================================


def check_executable(module: ModuleOp, runner: TargetAttr, scattered: Sequence[str] = ()) -> None:
    """Reject (``InputRejected``) a planned module with a decision that a runner of
    target ``runner`` cannot execute, naming the op: a zero-copy group or a shared tile
    transport without shared memory, a streamed collective copy on a communicator that
    does not copy on the host, a streamed copy on a target that never streams, a
    zero-copy group over an argument the run passes in pieces."""
    planned = planned_target(module)
    where = f"planned for target '{planned.target_name}'" if planned is not None else "planned"
    fix = f"lower it for '{runner.target_name}' (or without a target: the runner then plans it)"
    for f in module.ops:
        if not isinstance(f, func.FuncOp):
            continue
        pieces = _named(f, scattered)
        for op in f.walk():
            why = None
            if isinstance(op, rt.FusedOp) and op.mode == "zero_copy":
                if not runner.shared_memory:
                    why = "runs zero_copy, which needs ranks that share memory"
                elif pieces and any(root(v) in pieces for v in _fused_buffers(op)):
                    why = "runs zero_copy over an argument the run passes in pieces"
            elif isinstance(op, rt.TiledCollectiveOp) and op.option("transport") == "shared" and not runner.shared_memory:
                why = "stores tiles into peers' buffers (transport shared), which needs ranks that share memory"
            elif isinstance(op, nccl.NcclOp) and "stream_from" in op.properties and op.name.removeprefix("nccl.") not in runner.host_copies:
                why = "streams its data copies (stream_from), but this communicator does not copy them on the host"
            elif isinstance(op, rt.CopyOp) and "stream_from" in op.properties and runner.stream_from is None:
                why = "streams its copy (stream_from), which this device never does"
            if why:
                raise InputRejected(f"'{op.name}' op {why}: the program is {where}, this runner executes target '{runner.target_name}'; {fix}")


def _named(f: func.FuncOp, names: Sequence[str]) -> set[SSAValue]:
    """The buffers a run passes in pieces although the plan did not expect it: the
    arguments called ``names`` that are not marked ``{rt.scattered}``, and the arenas
    holding one of them."""
    if not names:
        return set()
    marked = scattered_arguments(f)
    return _with_arenas(f, {a for a in f.body.block.args if a.name_hint in set(names) and a not in marked})


def _fused_buffers(op: rt.FusedOp) -> list[SSAValue]:
    return [v for inner in op.body.block.ops for v in inner.operands if isinstance(v.type, MemRefType)]
