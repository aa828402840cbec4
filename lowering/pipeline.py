"""The default lowering pipeline: from a dist/coll-level program to the runtime level.

    form-collectives        (only when functional primitives are left: they never run)
    fix-mesh-sizes{ranks=N}
    combine-collectives     (independent collectives of one kind become one; CoCoNet's
                             scattered tensors, DDP's buckets: on by default, so every
                             schedule the tuner or a user writes is combined when it runs)
    lower-overlap           (coll.overlap chains cut into chunks on two streams)
    lower-buckets           (a combined collective runs over one buffer, the maps that
                             follow it as one kernel over that buffer)
    lower-to-kernels
    lower-collectives
    plan-execution{target=T} (with a target: how the program executes there,
                             ``docs/planning.md``)

``lower(module, ranks, target)`` applies it to a copy of the module; a module that is
already lowered (its functions carry ``rt.dist_type``) is returned as it is (planned, on a
copy, when a target is given and it is not planned yet).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import VerifyException

from distir.dialects import dist
from distir.dialects.fast import clone, walk
from distir.lowering.lower_collectives import DIST_TYPE
from distir.lowering.target import planned_target
from distir.passes.support import gc_paused

PRIMITIVES = (dist.ReduceOp, dist.SliceOp, dist.JoinOp, dist.ReplOp, dist.DropOp, dist.StoreOp, dist.LoadOp)


def pipeline_string(ranks: int, primitives: bool = False, target: str | None = None) -> str:
    """The ``-p`` string of the default lowering pipeline for ``ranks`` ranks (planned
    for ``target`` when one is given)."""
    steps = ["form-collectives"] if primitives else []
    steps += [f"fix-mesh-sizes{{ranks={ranks}}}", "combine-collectives", "lower-overlap", "lower-buckets", "lower-to-kernels", "lower-collectives"]
    if target is not None:
        steps.append(f"plan-execution{{target={target}}}")
    return ",".join(steps)


def is_lowered(module: ModuleOp) -> bool:
    funcs = [f for f in module.ops if isinstance(f, func.FuncOp)]
    return bool(funcs) and all(DIST_TYPE in f.attributes for f in funcs)


def lower(module: ModuleOp, ranks: int, target: str | None = None, scattered: Sequence[str] = (), verify: bool = True) -> ModuleOp:
    """The module lowered for ``ranks`` ranks (a copy; the input is left as it is) and,
    with a ``target``, planned for it (``plan-execution``; ``scattered`` names the
    arguments a run passes in pieces).

    ``verify=False`` lowers a program that is only predicted, never run (the planner's
    candidates, whose dist-level program is verified): the passes' results are not
    verified, which is most of the lowering's time on a model's program.

    Nothing that does not verify comes out: the input is verified first (free when it
    verified already and did not change since, ``dialects/verifier.ensure_verified``),
    and every pass's result after it (incrementally: the ops it changed). A pass that
    produces a program that does not verify is a ``PassProducedInvalidIR`` naming it (a
    bug in distir); a rank count the program cannot take (``fix-mesh-sizes``) a
    ``VerifyException``. Scopes are checked once, at the end; should anything fail, the
    lowering runs again checking them after every pass, to name the pass and locate the
    diagnostic in the source."""
    from distir.dialects.verifier import ensure_verified, verified_clone
    from distir.lowering.plan_execution import plan

    if is_lowered(module):
        ensure_verified(module)  # an already lowered program verifies before it runs
        if target is not None:
            if planned_target(module) is None:
                module = verified_clone(module)
            plan(module, target, scattered)
        return module
    if not verify:
        return _lower_unverified(module, ranks, target, scattered)
    with gc_paused():
        out = _lower(module, ranks)
        if target is not None:
            plan(out, target, scattered)
        return out


def passes_for(module: ModuleOp, ranks: int) -> list:
    """The passes of the default lowering of ``module`` for ``ranks`` ranks
    (``pipeline_string``)."""
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass
    from distir.lowering.lower_buckets import LowerBucketsPass
    from distir.lowering.lower_collectives import LowerCollectivesPass
    from distir.lowering.lower_overlap import LowerOverlapPass
    from distir.lowering.lower_to_kernels import LowerToKernelsPass
    from distir.passes.combine_collectives import CombineCollectivesPass

    out = []
    if any(issubclass(t, PRIMITIVES) for t in {type(op) for op in walk(module)}):
        from distir.passes.registry import ALL_PASSES

        out.append(ALL_PASSES["form-collectives"]()())
    return out + [FixMeshSizesPass(ranks=ranks), CombineCollectivesPass(), LowerOverlapPass(), LowerBucketsPass(), LowerToKernelsPass(), LowerCollectivesPass()]


def _lower(module: ModuleOp, ranks: int, checked: bool = False) -> ModuleOp:
    """``lower`` without a target. Fast (``checked=False``): scopes checked once at the
    end, no source positions; any failure runs the lowering again ``checked`` (scopes
    after every pass, diagnostics located in the source), which raises the diagnostic
    that names the pass."""
    from distir.dialects.diagnostics import InternalError
    from distir.dialects.verifier import check_scopes, verified_clone
    from distir.passes.pipeline import run_passes

    out = verified_clone(module, spans=checked)
    try:
        run_passes(out, passes_for(out, ranks), Context(), scopes=checked, input_verified=True)
        broken = not checked and check_scopes(out) is not None
    except (InternalError, VerifyException):
        if checked:
            raise
        broken = True
    if broken:
        _lower(module, ranks, checked=True)
        raise InternalError("the default lowering produced a program that does not verify (not again when run checking every pass)")
    return out


def _lower_unverified(module: ModuleOp, ranks: int, target: str | None, scattered: Sequence[str]) -> ModuleOp:
    """``lower(verify=False)``: the same passes on a copy, nothing verified."""
    from distir.lowering.plan_execution import PlanExecutionPass
    from distir.lowering.target import get_target
    from distir.passes.pipeline import run_passes

    with gc_paused():
        out = clone(module)
        passes = passes_for(out, ranks)
        if target is not None:
            passes.append(PlanExecutionPass(get_target(target).target_name, tuple(scattered)))
        run_passes(out, passes, Context(), verify=False)
        return out


def dist_view(f: func.FuncOp) -> func.FuncOp:
    """A lowered function seen at the dist level: a body-less function with its
    ``rt.dist_type`` signature and argument names (what the npz conventions read); any
    other function as it is."""
    t = f.attributes.get(DIST_TYPE)
    if t is None:
        return f
    from xdsl.dialects.builtin import FunctionType
    from xdsl.ir import Block, Region

    assert isinstance(t, FunctionType)
    block = Block(arg_types=t.inputs.data)
    for new, old in zip(block.args, f.body.block.args):
        new.name_hint = old.name_hint
    block.add_op(func.ReturnOp())
    return func.FuncOp(f.sym_name.data, t, Region(block), arg_attrs=f.arg_attrs, res_attrs=f.res_attrs)
