"""Every distir pass by name (kebab-case), as factories returning the pass class: the one
table of passes, for every layer.

Read by ``distir-opt`` and ``passes/pipeline.py``, and published to stock ``xdsl-opt``
through the ``xdsl.universe`` entry point (``tools/universe.py``). Each entry names the
module that defines the pass and is imported only when the pass is used, so that tools
start fast and this table (at the ``passes`` floor) can list the passes of the layers
above it (``frontends``, ``lowering``, ``synthesis``) without importing them. ``canonicalize`` is
xDSL's own pass: it applies the canonicalization patterns that the ``dist``/``coll`` ops
declare (``passes/canonicalize.py``).
"""

from collections.abc import Callable
from importlib import import_module

from xdsl.passes import ModulePass


def _lazy(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    return lambda: getattr(import_module(f"distir.{module}"), cls)


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    # functional identities and CoCoNet's transformations (passes/)
    "expand-collectives": _lazy("passes.expand_collectives", "ExpandCollectivesPass"),
    "form-collectives": _lazy("passes.form_collectives", "FormCollectivesPass"),
    "cancel-primitives": _lazy("passes.cancel_primitives", "CancelPrimitivesPass"),
    "commute-maps": _lazy("passes.commute_maps", "CommuteMapsPass"),
    "fuse-maps": _lazy("passes.fuse_maps", "FuseMapsPass"),
    "split-allreduce": _lazy("passes.split_allreduce", "SplitAllReducePass"),
    "reorder-allgather": _lazy("passes.reorder_allgather", "ReorderAllGatherPass"),
    "reorder-broadcast": _lazy("passes.reorder_broadcast", "ReorderBroadcastPass"),
    "reorder-send": _lazy("passes.reorder_send", "ReorderSendPass"),
    "slice-state": _lazy("passes.slice_state", "SliceStatePass"),
    "fuse-allreduce": _lazy("passes.fuse_allreduce", "FuseAllReducePass"),
    "fuse-collectives": _lazy("passes.fuse_collectives", "FuseCollectivesPass"),
    "overlap": _lazy("passes.overlap", "OverlapPass"),
    "combine-collectives": _lazy("passes.combine_collectives", "CombineCollectivesPass"),
    # placing programs imported from JAX and MLIR shard (frontends/)
    "partition": _lazy("frontends.partition", "PartitionPass"),
    # leaving the dist/coll level (lowering/)
    "fix-mesh-sizes": _lazy("lowering.fix_mesh_sizes", "FixMeshSizesPass"),
    "lower-overlap": _lazy("lowering.lower_overlap", "LowerOverlapPass"),
    "lower-buckets": _lazy("lowering.lower_buckets", "LowerBucketsPass"),
    "lower-to-kernels": _lazy("lowering.lower_to_kernels", "LowerToKernelsPass"),
    "lower-collectives": _lazy("lowering.lower_collectives", "LowerCollectivesPass"),
    "plan-execution": _lazy("lowering.plan_execution", "PlanExecutionPass"),
    # P² synthesis (synthesis/)
    "synthesize-reductions": _lazy("synthesis.synthesize_reductions", "SynthesizeReductionsPass"),
}
