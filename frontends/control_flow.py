"""StableHLO's control flow (``while``, ``case``, ``if``) and the in-place update that
loops write their outputs with (``dynamic_update_slice``), read into straight-line
``dist`` IR: loops are **unrolled at import**, branches are **chosen or selected**.

=======================================  ==============================================
StableHLO op                             dist IR
=======================================  ==============================================
``stablehlo.while(%i = %a, ..) : T..     unrolled: the condition region is evaluated
  cond { .. } do { .. }``                at import on the loop-carried values (a
(``lax.scan``, ``fori_loop``,            counter and its bound are integer constants,
``while_loop``)                          ``fold_constant``); while it holds, the body is
                                         translated once more on them. A condition that
                                         is not known at import (it depends on the data)
                                         is a diagnostic naming the loop
``"stablehlo.case"(%i) ({..}, ..)``      a known index: its branch only (out of range:
(``lax.switch``, ``lax.cond``)           the last, as StableHLO says); a computed one:
``"stablehlo.if"(%p) ({..}, {..})``      every branch, then ``arith.select`` of their
                                         results by the index (a ``dist.map``)
``dynamic_update_slice %x, %u, %i..``    starts known at import: a block along one dim
                                         is kept lazy (``Patched``: read back whole by
                                         ``dynamic_slice``, else one ``dist.concat``);
                                         any other update: ``dist.concat`` of the parts
``optimization_barrier``                 its operands (no meaning for distir)
=======================================  ==============================================

**Why unroll.** Every consumer of dist IR -- the ``partition`` pass (factor propagation
over use-def chains), CoCoNet's passes, the lowering to kernels and NCCL calls, the four
runtimes, the tuner and its cost model -- works on straight-line code, and a loop op with
loop-carried dist tensors would need each of them to reach a fixed point over the back
edge (placements, fusion legality, schedules, costs). Unrolled, the iterations are ordinary
ops: each layer of a scanned model is partitioned like a hand-written one, and passes can
combine or overlap the collectives of neighbouring iterations (what bucketing does). The
price is size: the program grows linearly with the trip count, so loops are for the trip
counts models have (layers, micro-batches, ring steps). The translation of a function is
limited to ``MAX_UNROLLED_OPS`` source ops executed inside loops (each iteration's
condition and body count; nested loops multiply); past it the import stops with a
diagnostic naming the loop. Compile time is linear in the trip count: an iteration
translates its region once, and the names a region defines are forgotten after it
(``Translator.translate_region``); ``test_loops.py`` counts the work at two trip counts.

**Why select.** A branch index computed at run time (a data-dependent ``lax.cond``) has
every branch computed and the results selected element-wise. StableHLO's ops are free of
side effects (distir reads no infeed, outfeed, send or recv), so this is exact; the cost
is the work of the branches not taken. Collectives inside branches (in a manual
computation) run on every device, whichever branch it takes, which is what SPMD programs
need anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, i1
from xdsl.ir import Attribute, Operation, SSAValue

from distir.dialects import dist
from distir.frontends import stablehlo
from distir.frontends.device_values import DevVal
from distir.frontends.mlir_text import OpNode, Reader
from distir.frontends.stablehlo import Const, Patched, Translator, Val, handles, shape_of

MAX_UNROLLED_OPS = 250_000
"""Source ops a function may execute inside loops (conditions and bodies, every
iteration); about 3 minutes of import at the measured 0.65 ms per op."""


# ======================================================================================
# Custom form
# ======================================================================================


def _while(r: Reader, node: OpNode) -> None:
    """``stablehlo.while(%it = %init, ...) : T, ... [attributes {..}] cond { .. } do { .. }``
    (both regions take the loop-carried values, named as the ``%it`` list)."""
    r.expect("(", " after 'stablehlo.while'")
    names = []
    if not r.accept(")"):
        while True:
            names.append(r.value())
            r.expect("=", " after a loop-carried value's name")
            node.operands.append(r.value())
            if r.accept(")"):
                break
            r.expect(",", " or ')' between loop-carried values")
    types = []
    if names:
        r.expect(":", " before the types of the loop-carried values")
        types.append(r.type())
        while r.accept(","):
            types.append(r.type())
    if r.peek().kind == "ident" and r.peek().text == "attributes":
        r.next()
        node.attrs.update(r.attr_dict())
    if len(types) != len(names):
        raise r.error(f"'stablehlo.while' has {len(names)} loop-carried value(s) and {len(types)} type(s)")
    node.in_types, node.out_types = list(types), list(types)
    for key in ("cond", "do"):
        r.keyword(key, " (the regions of 'stablehlo.while')")
        region = r.region()
        if region[0].args:
            raise r.error(f"the '{key}' region of 'stablehlo.while' takes the loop-carried values, not block arguments")
        region[0].args = list(zip(names, types))
        node.regions.append(region)
    r.check_counts(node)


stablehlo.HOOKS["stablehlo.while"] = _while
stablehlo.HOOKS["stablehlo.optimization_barrier"] = stablehlo._elementwise


# ======================================================================================
# Loops
# ======================================================================================


def _loop_name(node: OpNode) -> str:
    if not node.results:
        return "'stablehlo.while'"
    first = node.results[0].name.split("#")[0]
    return f"'stablehlo.while' (%{first})"


def _known_bool(v: Val) -> bool | None:
    """The value of a predicate known at import time (None when it is computed)."""
    if isinstance(v, Const) and shape_of(v) == ():
        return bool(v.value)
    if isinstance(v, DevVal) and v.shape == () and v.uniform():
        return bool(v.values[0])
    return None


@handles("stablehlo.while")
def _h_while(tr: Translator, node: OpNode) -> list[Val]:
    """The loop unrolled: the condition evaluated at import on the loop-carried values, the
    body translated once per iteration (see the module doc)."""
    if len(node.regions) != 2 or any(len(reg) != 1 for reg in node.regions):
        raise tr.error("'stablehlo.while' needs a condition region and a body region", node)
    cond, body = node.regions[0][0], node.regions[1][0]
    n = len(node.operands)
    if len(cond.args) != n or len(body.args) != n:
        raise tr.error(f"the regions of 'stablehlo.while' must take its {n} loop-carried value(s)", node)
    state: list[Val] = [tr.operand(node, i) for i in range(n)]
    budget_start = tr.visited
    iteration = 0
    while True:
        if tr.visited - budget_start + iteration > MAX_UNROLLED_OPS:
            raise tr.error(
                f"{_loop_name(node)} is still running after {iteration} iterations: unrolling it exceeds distir's limit of "
                f"{MAX_UNROLLED_OPS} ops executed in loops (distir unrolls loops at import)",
                node,
            )
        outs = tr.translate_region(cond, state)
        tr.node = node
        if len(outs) != 1:
            raise tr.error(f"the condition of {_loop_name(node)} returns {len(outs)} values, not one predicate", node)
        go = _known_bool(outs[0])
        if go is None:
            raise tr.error(
                f"the trip count of {_loop_name(node)} depends on values computed at run time: distir unrolls loops at "
                "import and needs a condition known there (a counter compared with a constant, as lax.scan and fori_loop write)",
                node,
            )
        if not go:
            break
        new = tr.translate_region(body, state)
        tr.node = node
        if len(new) != n:
            raise tr.error(f"the body of {_loop_name(node)} returns {len(new)} value(s) for {n} loop-carried value(s)", node)
        for i, (a, b) in enumerate(zip(state, new)):
            if shape_of(a) != shape_of(b):
                raise tr.error(
                    f"the body of {_loop_name(node)} returns {stablehlo._fmt(shape_of(b))} for loop-carried value {i} of shape {stablehlo._fmt(shape_of(a))}",
                    node,
                )
        state = new
        iteration += 1
    return state


@handles("stablehlo.optimization_barrier")
def _h_barrier(tr: Translator, node: OpNode) -> list[Val]:
    return [tr.operand(node, i) for i in range(len(node.operands))]


# ======================================================================================
# Branches
# ======================================================================================


@handles("stablehlo.case", "stablehlo.if")
def _h_branches(tr: Translator, node: OpNode) -> list[Val]:
    """``case``: branch ``index`` (the last when out of range); ``if``: the first branch
    when the predicate holds. Known at import: that branch only; computed: every branch and
    a select of their results (exact: the branches have no side effects)."""
    what = node.name
    if len(node.operands) != 1:
        raise tr.error(f"'{what}' takes one operand (the {'index' if what.endswith('case') else 'predicate'})", node)
    if not node.regions or any(len(reg) != 1 or reg[0].args for reg in node.regions):
        raise tr.error(f"'{what}' needs branch regions without arguments", node)
    if what == "stablehlo.if" and len(node.regions) != 2:
        raise tr.error("'stablehlo.if' needs two branches", node)
    key = tr.operand(node, 0)
    if shape_of(key) != ():
        raise tr.error(f"the {'index' if what.endswith('case') else 'predicate'} of '{what}' must be a 0-d tensor", node)
    branches = [reg[0] for reg in node.regions]
    if what == "stablehlo.if":
        branches = branches[::-1]  # index 0: false, 1: true, as a case of the predicate
    known = None
    if isinstance(key, Const):
        known = int(key.value)
    elif isinstance(key, DevVal) and key.uniform():
        known = int(key.values[0])
    if known is not None:
        chosen = known if 0 <= known < len(branches) else len(branches) - 1
        outs = _branch(tr, node, branches[chosen])
        return outs
    results = [_branch(tr, node, b) for b in branches]
    index = tr.materialize(key)
    return [_select(tr, node, index, [r[k] for r in results], k) for k in range(len(node.results))]


def _branch(tr: Translator, node: OpNode, body) -> list[Val]:
    outs = tr.translate_region(body, [])
    tr.node = node
    if len(outs) != len(node.results):
        raise tr.error(f"a branch of '{node.name}' returns {len(outs)} value(s) for {len(node.results)} result(s)", node)
    for k, (o, t) in enumerate(zip(outs, node.out_types)):
        tt = tr.tensor_t(t, f"result {k}", node)
        if shape_of(o) != tt.shape:
            raise tr.error(f"a branch of '{node.name}' returns {stablehlo._fmt(shape_of(o))} as result {k}, its type says {tt}", node)
    return outs


def _select(tr: Translator, node: OpNode, index: SSAValue, values: list[Val], k: int) -> SSAValue:
    """``values[index]`` (the last when out of range; an ``i1`` index picks 1 or 0) as one
    ``dist.map`` of the index and the branches' results."""
    t = stablehlo._result(tr, node, k)
    elt = tr.elt(t.elt, node)
    xs = [tr.materialize(v) for v in values]
    idx_elt = stablehlo._elt_of(index)
    assert isinstance(idx_elt, IntegerType)

    def body(a: list[SSAValue]) -> list[Operation]:
        ops: list[Operation] = []
        acc = a[-1]
        for j in range(len(xs) - 2, -1, -1):
            c = tr.const_op(j, idx_elt) if idx_elt != i1 else tr.const_op(bool(j), i1)
            eq = arith.CmpiOp(a[0], c.results[0], "eq")
            sel = arith.SelectOp(eq.results[0], a[1 + j], acc)
            ops += [c, eq, sel]
            acc = sel.results[0]
        return ops or [acc]  # type: ignore[list-item]

    elts: list[Attribute] = [idx_elt] + [elt] * len(xs)
    return tr.map_op([index, *xs], elts, t.shape, elt, body)


# ======================================================================================
# dynamic_update_slice at known offsets
# ======================================================================================


def _known_starts(tr: Translator, node: OpNode, first: int, shape: Sequence[int], sizes: Sequence[int]) -> list[int] | None:
    """The start indices of the op (operands ``first``..) clamped into ``[0, dim - size]``
    as StableHLO does, when all are known at import; None otherwise."""
    out = []
    for d in range(len(shape)):
        v = tr.operand(node, first + d)
        if isinstance(v, Const) and shape_of(v) == () and not isinstance(v.value, float):
            x = int(v.value)
        elif isinstance(v, DevVal) and v.shape == () and v.uniform() and not isinstance(v.values[0], float):
            x = int(v.values[0])
        else:
            return None
        out.append(min(max(x, 0), shape[d] - sizes[d]))
    return out


@handles("stablehlo.dynamic_update_slice")  # in place of stablehlo._h_dynamic_update_slice, which it calls
def _h_dynamic_update_slice(tr: Translator, node: OpNode) -> list[Val]:
    """``x`` with ``update`` written at starts known at import: a block that spans every
    dim but one is kept lazy (``Patched``); any other update is
    ``stablehlo._h_dynamic_update_slice`` (the parts around it and the update,
    concatenated)."""
    if len(node.operands) >= 2 and node.out_types:
        t = stablehlo._result(tr, node)
        x, u = tr.operand(node, 0), tr.operand(node, 1)
        shape, usz = shape_of(x), shape_of(u)
        fits = len(node.operands) == 2 + len(shape) and len(usz) == len(shape) and shape == t.shape and all(b <= a for a, b in zip(shape, usz))
        partial = [d for d in range(len(shape)) if usz[d] != shape[d]]
        if fits and len(partial) == 1 and stablehlo._elt_of(x) == stablehlo._elt_of(u):
            starts = _known_starts(tr, node, 2, shape, usz)
            if starts is not None:
                d = partial[0]
                return [_patch(tr, x, u, d, starts[d], usz[d], stablehlo._elt_of(x))]
    return stablehlo._h_dynamic_update_slice(tr, node)


def _patch(tr: Translator, x: Val, u: Val, dim: int, start: int, size: int, elt: Attribute) -> Val:
    """``x`` with block [start, start + size) along ``dim`` replaced by ``u`` (lazy)."""
    if isinstance(x, Patched) and x.dim == dim:
        y = x.write(start, size, u)
        if y is not None:
            return y
    base = x if isinstance(x, (Const, SSAValue)) else tr.materialize(x)
    return Patched(base, dim, shape_of(x), elt).write(start, size, u)  # type: ignore[return-value]
