"""The Python schedule API, mirroring CoCoNet's scheduling language, and plain pass
pipelines.

A ``Schedule`` holds a program and applies transformations to its named values, as
CoCoNet's ``split``, ``reorder``, ``fuse``, ``overlap`` and ``asSlice`` do; each call
builds the distir pass that implements it (with ``targets`` naming the values), applies
it, and records it, so ``pipeline()`` gives the ``distir-opt -p`` line that produces
the same program::

    from distir.tuning.schedule import Schedule

    s = Schedule.load("examples/adam.mlir")        # CoCoNet's AR-Adam
    s.fuse()                                      # ComputationFuse: one map for m, v, p
    rs, ag = s.split("avg")                       # ARSplitRSAG: ("avg_rs", "avg_ag")
    s.reorder(ag)                                 # AGReorder: Adam runs on slices (RS-Adam-AG)
    s.as_slice("m", "v")                          # asSlice(m); asSlice(v); dead(agM); dead(agV)
    s.fuse(rs, policy="allreduce")                # AllReduceFuse: fuse(RS-Adam-AG)
    print(s)                                      # the transformed module
    print(s.pipeline())                           # fuse-maps,split-allreduce{targets=avg},...
    assert s.check(ranks=4)                       # interpreter: same outputs as the original

Verbs (each returns the schedule, except ``split``, which returns the two new names):

* ``split(name, policy="rs-ag"|"reduce-bcast", dim=None, root=0)`` -> ``split-allreduce``
* ``reorder(*names, policy="allgather"|"broadcast"|"send")`` -> ``reorder-allgather``,
  ``reorder-broadcast``, ``reorder-send`` (names: the collectives or computations)
* ``fuse(*names, policy="computation"|"allreduce"|"collective")`` -> ``fuse-maps``
  (names: the maps; none = all), ``fuse-allreduce`` and ``fuse-collectives`` (the named
  reduce_scatters / collectives are the targets; other names must exist, as CoCoNet's
  ``fuse(rsG, scComp, agP)`` lists the whole chain)
* ``as_slice(*names)`` -> ``slice-state`` (function arguments)
* ``overlap(*names, chunks=4, order="natural"|"ring"|"remote_first",
  granularity="chunk"|"tile")`` -> ``overlap`` (``tile``: a fused computation-collective
  operator, the fused-operator paper)
* ``canonicalize()`` and ``apply(*passes)`` for anything else (pass objects or ``-p``
  text)

A request the rules forbid raises the pass's diagnostic (``PassFailedException``) and
leaves the schedule unchanged. Plain pipelines need no schedule::

    from xdsl.passes import PassPipeline
    from distir.passes.split_allreduce import SplitAllReducePass
    from distir.passes.reorder_allgather import ReorderAllGatherPass
    PassPipeline((SplitAllReducePass(), ReorderAllGatherPass())).apply(make_context(), module)
    # or, with -p text and verification after each pass:
    apply_pipeline(module, "split-allreduce,reorder-allgather")

``PAPER_SCHEDULES`` lists the papers' schedules of the examples (CoCoNet names), each a
function of a ``Schedule``; ``examples/schedules/`` holds their outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from distir.dialects import coll
from distir.passes.pipeline import parse_pipeline, pipeline_spec, run_passes
from distir.passes.support import Targets, printed_names


class Schedule:
    """A program and the transformations applied to it so far (see the module doc)."""

    def __init__(self, program: ModuleOp | str, name: str = "<program>"):
        from distir.dialects.context import make_context, parse_module

        self.ctx = make_context()
        from distir.dialects.verifier import verified_clone

        self.module = parse_module(program, name) if isinstance(program, str) else verified_clone(program)
        self.original = verified_clone(self.module)
        self.passes: list[ModulePass] = []

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        return cls(Path(path).read_text(), str(path))

    # ------------------------------------------------------------------ plumbing
    def apply(self, *passes: ModulePass | str) -> Schedule:
        """Apply passes (objects or ``-p`` text) and record them."""
        for p in passes:
            for q in parse_pipeline(p) if isinstance(p, str) else (p,):
                run_passes(self.module, [q], self.ctx)  # verified after, naming the pass
                self.passes.append(q)
        return self

    def pipeline(self) -> str:
        """The ``distir-opt -p`` text that turns the original program into this one."""
        return pipeline_spec(self.passes)

    def text(self) -> str:
        return str(self.module)

    def __str__(self) -> str:
        return self.text()

    def names(self) -> dict[str, list]:
        """Printed SSA names (without ``%``) and the values they name."""
        out: dict[str, list] = {}
        for v, n in printed_names(self.module).items():
            out.setdefault(n, []).append(v)
        return out

    def check(self, ranks: int, trials: int = 2, seed: int = 0):
        """Run the original and the scheduled program on the same random inputs with the
        interpreter; the report is truthy when they agree."""
        from distir.runtime import equivalent

        return equivalent(self.original, self.module, ranks, trials=trials, seed=seed)

    def _pick(self, verb: str, names: Sequence[str], kinds: tuple[type[Operation], ...], what: str) -> tuple[str, ...]:
        """The names among ``names`` that name results of ``kinds``; all must name values."""
        targets = Targets(verb, names, self.module)
        targets.require_known("values")
        picked = tuple(n for n in targets.wanted if any(isinstance(v.owner, kinds) for v in targets.values(n)))
        if not picked:
            raise PassFailedException(f"'{verb}': none of {', '.join('%' + n for n in names)} is {what}")
        return picked

    # ------------------------------------------------------------------ CoCoNet's verbs
    def split(self, name: str, policy: str = "rs-ag", dim: int | None = None, root: int = 0) -> tuple[str, str]:
        """CoCoNet ``split``: an AllReduce into ReduceScatter + AllGather (``rs-ag``) or
        Reduce + Broadcast (``reduce-bcast``), along ``dim`` (default: the pass's choice,
        ``passes/split_allreduce.py``); returns the names of the two new values."""
        from distir.passes.split_allreduce import SplitAllReducePass

        self.apply(SplitAllReducePass(strategy=policy, dim=dim, root=root, targets=(name,)))
        suffixes = ("_rs", "_ag") if policy == "rs-ag" else ("_reduce", "_bcast")
        names = self.names()
        first, second = (f"{name}{s}" for s in suffixes)
        if first not in names or second not in names:
            raise PassFailedException(f"'split': the values of the split %{name} got other names; see the module")
        return first, second

    def reorder(self, *names: str, policy: str = "allgather") -> Schedule:
        """CoCoNet ``reorder``: move computations (or a send) before an AllGather
        (``allgather``), a Broadcast (``broadcast``) or move a send before an AllGather
        (``send``)."""
        from distir.passes.reorder_allgather import ReorderAllGatherPass
        from distir.passes.reorder_broadcast import ReorderBroadcastPass
        from distir.passes.reorder_send import ReorderSendPass

        passes = {"allgather": ReorderAllGatherPass, "broadcast": ReorderBroadcastPass, "send": ReorderSendPass}
        if policy not in passes:
            raise PassFailedException(f"'reorder': policy must be one of {', '.join(passes)}, got '{policy}'")
        return self.apply(passes[policy](targets=tuple(names)))

    def fuse(self, *names: str, policy: str = "computation") -> Schedule:
        """CoCoNet ``fuse``: computations into one map (``computation``), ReduceScatter +
        computations + AllGather into a fused all-reduce (``allreduce``), or a collective
        with its computations into a fused collective (``collective``)."""
        from distir.passes.fuse_allreduce import FuseAllReducePass
        from distir.passes.fuse_collectives import (
            FINISH_FUSED,
            FIRST_FUSED,
            FuseCollectivesPass,
        )
        from distir.passes.fuse_maps import FuseMapsPass

        if policy == "computation":
            return self.apply(FuseMapsPass(targets=tuple(names)))
        if policy == "allreduce":
            picked = self._pick("fuse", names, (coll.ReduceScatterOp,), "a coll.reduce_scatter result") if names else ()
            return self.apply(FuseAllReducePass(targets=picked))
        if policy == "collective":
            kinds = (*FIRST_FUSED, *FINISH_FUSED)
            picked = self._pick("fuse", names, kinds, "the result of a fusable collective") if names else ()
            return self.apply(FuseCollectivesPass(targets=picked))
        raise PassFailedException(f"'fuse': policy must be one of computation, allreduce, collective, got '{policy}'")

    def as_slice(self, *names: str) -> Schedule:
        """CoCoNet ``asSlice`` + ``dead``: keep in-place state sliced (ZeRO)."""
        from distir.passes.slice_state import SliceStatePass

        return self.apply(SliceStatePass(targets=tuple(names)))

    def overlap(self, *names: str, chunks: int = 4, order: str = "natural", granularity: str = "chunk") -> Schedule:
        """CoCoNet ``overlap``: run a producer -> collective chain chunk by chunk; with
        ``granularity="tile"`` the chain becomes one fused computation-collective
        operator (the fused-operator paper), ``chunks`` tiles per destination."""
        from distir.passes.overlap import OverlapPass

        return self.apply(OverlapPass(chunks=chunks, order=order, granularity=granularity, targets=tuple(names)))

    def canonicalize(self) -> Schedule:
        return self.apply("canonicalize")


# --------------------------------------------------------------------------------------
# The papers' schedules of the examples
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperSchedule:
    """A schedule of an example program, named as CoCoNet names it."""

    example: str
    """File in ``examples/``."""
    name: str
    """CoCoNet's name, e.g. ``fuse(RS-Adam-AG)``."""
    output: str
    """File in ``examples/schedules/`` holding the result."""
    build: Callable[[Schedule], object]

    def run(self, program: ModuleOp | str | None = None, examples: Path | None = None) -> Schedule:
        """Apply the schedule to ``program`` (default: the example file)."""
        if program is None:
            program = ((examples or _examples_dir()) / self.example).read_text()
        s = Schedule(program, self.example)
        self.build(s)
        return s


def _examples_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "examples"


def _optimizer_rs(s: Schedule) -> None:
    s.fuse()
    _, ag = s.split("avg")
    s.reorder(ag)


def _optimizer_fused(state: tuple[str, ...]) -> Callable[[Schedule], None]:
    def build(s: Schedule) -> None:
        s.fuse()
        rs, ag = s.split("avg")
        s.reorder(ag)
        s.as_slice(*state)
        s.fuse(rs, policy="allreduce")

    return build


def _mm_rs_c_ag(dim: int) -> Callable[[Schedule], None]:
    def build(s: Schedule) -> None:
        _, ag = s.split("sum", dim=dim)
        s.reorder(ag)

    return build


def _ol_mm_fuse(dim: int, producer: str) -> Callable[[Schedule], None]:
    def build(s: Schedule) -> None:
        rs, ag = s.split("sum", dim=dim)
        s.reorder(ag)
        s.fuse(rs, "out", policy="allreduce")
        s.overlap(producer, "out", chunks=4, order="ring")

    return build


def _rs_p2p_c_ag(s: Schedule) -> None:
    _, ag = s.split("sum", dim=1)
    s.reorder("recv", policy="send")
    s.reorder("recv")


def _ol_rs_fuse_p2p_c_ag(s: Schedule) -> None:
    rs, ag = s.split("sum", dim=1)
    s.reorder("recv", policy="send")
    s.reorder("recv")
    s.fuse("out", policy="collective")
    s.overlap(rs, "out", chunks=4)


def _tiles(target: str):
    def schedule(s: Schedule) -> None:
        s.overlap(target, order="remote_first", granularity="tile")

    return schedule


PAPER_SCHEDULES: tuple[PaperSchedule, ...] = (
    PaperSchedule("adam.mlir", "AR-Adam", "adam_ar.mlir", lambda s: s.fuse()),
    PaperSchedule("adam.mlir", "RS-Adam-AG", "adam_rs_ag.mlir", _optimizer_rs),
    PaperSchedule("adam.mlir", "fuse(RS-Adam-AG)", "adam_fused.mlir", _optimizer_fused(("m", "v"))),
    PaperSchedule("lamb.mlir", "AR-LAMB", "lamb_ar.mlir", lambda s: s.fuse()),
    PaperSchedule("lamb.mlir", "RS-LAMB-AG", "lamb_rs_ag.mlir", _optimizer_rs),
    PaperSchedule("lamb.mlir", "fuse(RS-LAMB-AG)", "lamb_fused.mlir", _optimizer_fused(("m", "v"))),
    PaperSchedule("sgd.mlir", "AR-SGD", "sgd_ar.mlir", lambda s: s.fuse()),
    PaperSchedule("sgd.mlir", "RS-SGD-AG", "sgd_rs_ag.mlir", _optimizer_rs),
    PaperSchedule("sgd.mlir", "fuse(RS-SGD-AG)", "sgd_fused.mlir", _optimizer_fused(("m",))),
    PaperSchedule("megatron_attention.mlir", "MM-RS-C-AG", "megatron_attention_rs_c_ag.mlir", _mm_rs_c_ag(0)),
    PaperSchedule("megatron_attention.mlir", "ol(MM,fuse(RS-C-AG))", "megatron_attention_ol_fused.mlir", _ol_mm_fuse(0, "layer")),
    PaperSchedule("megatron_mlp.mlir", "MM-RS-C-AG", "megatron_mlp_rs_c_ag.mlir", _mm_rs_c_ag(1)),
    PaperSchedule("megatron_mlp.mlir", "ol(MM,fuse(RS-C-AG))", "megatron_mlp_ol_fused.mlir", _ol_mm_fuse(1, "o")),
    PaperSchedule("pipeline_layer.mlir", "RS-P2P-C-AG", "pipeline_layer_rs_p2p_c_ag.mlir", _rs_p2p_c_ag),
    PaperSchedule("pipeline_layer.mlir", "ol(RS,fuse(P2P-C),AG)", "pipeline_layer_ol_fused.mlir", _ol_rs_fuse_p2p_c_ag),
    # the fused-operator paper's operators: tiles bound for other ranks first
    PaperSchedule("transformer_decode.mlir", "fused(GEMV+AR)", "transformer_decode_fused.mlir", _tiles("sum")),
    PaperSchedule("dlrm_embedding.mlir", "fused(Emb+A2A)", "dlrm_embedding_fused.mlir", _tiles("mine")),
    PaperSchedule("moe.mlir", "fused(GEMM+A2A)", "moe_fused.mlir", _tiles("back")),
)


def render(ps: PaperSchedule, examples: Path | None = None) -> str:
    """The text of ``examples/schedules/<ps.output>``: a header giving the ``distir-opt``
    line that produces it, then the program."""
    s = ps.run(examples=examples)
    header = (
        f"// CoCoNet schedule {ps.name} of examples/{ps.example}, produced by\n"
        f"//   distir-opt examples/{ps.example} -p '{s.pipeline()}'\n"
        "// or by the Python schedule API (tuning/schedule.py, PAPER_SCHEDULES); regenerate\n"
        "// with: python -m distir.tuning.schedule examples/schedules\n"
    )
    return header + s.text() + "\n"


def write_schedules(directory: Path, examples: Path | None = None) -> list[Path]:
    """Write every paper schedule's output into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for ps in PAPER_SCHEDULES:
        path = directory / ps.output
        path.write_text(render(ps, examples))
        out.append(path)
    return out


if __name__ == "__main__":
    import sys

    for written in write_schedules(Path(sys.argv[1] if len(sys.argv) > 1 else _examples_dir() / "schedules")):
        print(written)
