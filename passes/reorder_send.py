"""``reorder-send{targets=...}``: commute a point-to-point ``coll.send`` with the
AllGather feeding it, so that only a slice crosses the stages (CoCoNet's pipeline
optimisation, "AR-P2P-C -> RS-P2P-C-AG")::

    send(all_gather(x), to) = all_gather(send(x, to))      send axes and gather axes disjoint

Both sides mean ``store(load(repl(join(x))))``: the primitives act on different mesh
axes and commute. The send then carries ``1/n`` of the data for a gather group of ``n``.
``targets`` names the sends to move (all sends fed by an AllGather when empty); a named
send whose operand is not an AllGather over other axes is an error. New values:
``%recv_s`` (the sliced send) and ``%recv`` (its AllGather, on the receiving stage).
Example, stage axis 0 and tensor-parallel axis 1::

    %sum_ag = coll.all_gather %sum_rs axes [1] : ... [at<0>, sliced<0>] -> ... [at<0>, replicated]
    %recv = coll.send %sum_ag to 1 : ... [at<0>, replicated] -> ... [at<1>, replicated]

becomes::

    %recv_s = coll.send %sum_rs to 1 : ... [at<0>, sliced<0>] -> ... [at<1>, sliced<0>]
    %recv = coll.all_gather %recv_s axes [1] : ... [at<1>, sliced<0>] -> ... [at<1>, replicated]
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from distir.dialects import coll
from distir.passes.support import (
    Targets,
    apply_all_or_nothing,
    display,
    fail,
    mesh_sizes,
    same_type,
    set_name,
    try_build,
)


def _reorder(send: coll.SendOp) -> str | None:
    """Move ``send`` before the AllGather feeding it; return why not, or None when done."""
    ag = send.input.owner
    if not isinstance(ag, coll.AllGatherOp):
        return f"its operand {display(send.input)} is not the result of a coll.all_gather"
    if set(ag.axes) & set(send.axes):
        return f"the send axes {list(send.axes)} and the gather axes {list(ag.axes)} overlap"
    sizes = mesh_sizes(send, send.input.type)  # type: ignore[arg-type]
    new_send = try_build(lambda: coll.SendOp.of(ag.input, sizes=sizes, to=send.option("to"), axes=list(send.axes)))
    if new_send is None:
        return f"the slice {display(ag.input)} cannot be sent"
    new_ag = try_build(lambda: coll.AllGatherOp.of(new_send.results[0], sizes=sizes, axes=list(ag.axes)))
    if new_ag is None or not same_type(new_ag.results[0].type, send.result.type):
        return "gathering the sent slice does not give the send's result type"
    set_name(new_send.results[0], send.result.name_hint, "_s")
    new_ag.results[0].name_hint = send.result.name_hint
    block = send.parent_block()
    assert block is not None
    block.insert_ops_before([new_send, new_ag], send)
    send.result.replace_all_uses_with(new_ag.results[0])
    send.detach()
    send.erase()
    if not ag.result.uses:
        ag.detach()
        ag.erase()
    return None


@dataclass(frozen=True)
class ReorderSendPass(ModulePass):
    """Send slices instead of gathered values; see the module docstring."""

    name = "reorder-send"

    targets: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def run(module: ModuleOp) -> None:
            targets = Targets(self.name, self.targets, module)
            sends = [o for o in module.walk() if isinstance(o, coll.SendOp)]
            targets.require_known("send results", [s.result for s in sends])
            for name in targets.wanted:
                targets.require(name, any(isinstance(v.owner, coll.SendOp) for v in targets.values(name)), "is not the result of a coll.send")
            for send in sends:
                if not targets.selects(send.result):
                    continue
                why = _reorder(send)
                if why is not None and not targets.all:
                    fail(self.name, f"target %{targets.name(send.result)}: cannot reorder the send with an all_gather: {why}")

        apply_all_or_nothing(op, run, self.targets)
