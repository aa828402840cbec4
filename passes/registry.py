"""All distir passes by name (kebab-case), as factories returning the pass class.

Read by ``distir-opt`` and published to stock ``xdsl-opt`` through the ``xdsl.universe``
entry point (``tools/universe.py``). ``canonicalize`` is xDSL's own pass: it applies the
canonicalization patterns that the ``dist``/``coll`` ops declare (``passes/canonicalize.py``).
"""

from collections.abc import Callable

from xdsl.passes import ModulePass


def _expand_collectives():
    from distir.passes.expand_collectives import ExpandCollectivesPass

    return ExpandCollectivesPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "expand-collectives": _expand_collectives,
}


def _form_collectives():
    from distir.passes.form_collectives import FormCollectivesPass

    return FormCollectivesPass


ALL_PASSES["form-collectives"] = _form_collectives


def _cancel_primitives():
    from distir.passes.cancel_primitives import CancelPrimitivesPass

    return CancelPrimitivesPass


def _commute_maps():
    from distir.passes.commute_maps import CommuteMapsPass

    return CommuteMapsPass


ALL_PASSES["cancel-primitives"] = _cancel_primitives
ALL_PASSES["commute-maps"] = _commute_maps


def _fuse_maps():
    from distir.passes.fuse_maps import FuseMapsPass

    return FuseMapsPass


ALL_PASSES["fuse-maps"] = _fuse_maps


# The lowering passes (lowering/registry.py): fix-mesh-sizes, lower-to-kernels, lower-collectives.
from distir.lowering.registry import LOWERING_PASSES  # noqa: E402

ALL_PASSES.update(LOWERING_PASSES)


def _split_allreduce():
    from distir.passes.split_allreduce import SplitAllReducePass

    return SplitAllReducePass


def _reorder_allgather():
    from distir.passes.reorder_allgather import ReorderAllGatherPass

    return ReorderAllGatherPass


def _reorder_broadcast():
    from distir.passes.reorder_broadcast import ReorderBroadcastPass

    return ReorderBroadcastPass


ALL_PASSES["split-allreduce"] = _split_allreduce
ALL_PASSES["reorder-allgather"] = _reorder_allgather
ALL_PASSES["reorder-broadcast"] = _reorder_broadcast


def _reorder_send():
    from distir.passes.reorder_send import ReorderSendPass

    return ReorderSendPass


def _slice_state():
    from distir.passes.slice_state import SliceStatePass

    return SliceStatePass


def _fuse_allreduce():
    from distir.passes.fuse_allreduce import FuseAllReducePass

    return FuseAllReducePass


ALL_PASSES["reorder-send"] = _reorder_send
ALL_PASSES["slice-state"] = _slice_state
ALL_PASSES["fuse-allreduce"] = _fuse_allreduce


def _fuse_collectives():
    from distir.passes.fuse_collectives import FuseCollectivesPass

    return FuseCollectivesPass


def _overlap():
    from distir.passes.overlap import OverlapPass

    return OverlapPass


ALL_PASSES["fuse-collectives"] = _fuse_collectives
ALL_PASSES["overlap"] = _overlap


# The lowering passes (lowering/registry.py): fix-mesh-sizes, lower-to-kernels, lower-collectives.
from distir.lowering.registry import LOWERING_PASSES  # noqa: E402

ALL_PASSES.update(LOWERING_PASSES)
