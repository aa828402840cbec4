"""All distir passes by name (kebab-case), as factories returning the pass class.

Read by ``distir-opt`` and published to stock ``xdsl-opt`` through the ``xdsl.universe``
entry point (``tools/universe.py``). ``canonicalize`` is xDSL's own pass: it applies the
canonicalization patterns that the ``dist``/``coll`` ops declare (``passes/canonicalize.py``).
Modules are imported only when a pass is used, so that ``distir-opt`` starts fast.
"""

from collections.abc import Callable
from importlib import import_module

from xdsl.passes import ModulePass

from distir.lowering.registry import LOWERING_PASSES


def _lazy(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    return lambda: getattr(import_module(f"distir.passes.{module}"), cls)


REWRITE_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "expand-collectives": _lazy("expand_collectives", "ExpandCollectivesPass"),
    "form-collectives": _lazy("form_collectives", "FormCollectivesPass"),
    "cancel-primitives": _lazy("cancel_primitives", "CancelPrimitivesPass"),
    "commute-maps": _lazy("commute_maps", "CommuteMapsPass"),
    "fuse-maps": _lazy("fuse_maps", "FuseMapsPass"),
    "split-allreduce": _lazy("split_allreduce", "SplitAllReducePass"),
    "reorder-allgather": _lazy("reorder_allgather", "ReorderAllGatherPass"),
    "reorder-broadcast": _lazy("reorder_broadcast", "ReorderBroadcastPass"),
    "reorder-send": _lazy("reorder_send", "ReorderSendPass"),
    "slice-state": _lazy("slice_state", "SliceStatePass"),
    "fuse-allreduce": _lazy("fuse_allreduce", "FuseAllReducePass"),
    "fuse-collectives": _lazy("fuse_collectives", "FuseCollectivesPass"),
    "overlap": _lazy("overlap", "OverlapPass"),
}

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {**REWRITE_PASSES, **LOWERING_PASSES}
