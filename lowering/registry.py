"""The lowering passes by name, merged into ``passes.registry.ALL_PASSES``."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def _fix_mesh_sizes():
    from distir.lowering.fix_mesh_sizes import FixMeshSizesPass

    return FixMeshSizesPass


def _lower_overlap():
    from distir.lowering.lower_overlap import LowerOverlapPass

    return LowerOverlapPass


def _lower_to_kernels():
    from distir.lowering.lower_to_kernels import LowerToKernelsPass

    return LowerToKernelsPass


def _lower_collectives():
    from distir.lowering.lower_collectives import LowerCollectivesPass

    return LowerCollectivesPass


LOWERING_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "fix-mesh-sizes": _fix_mesh_sizes,
    "lower-overlap": _lower_overlap,
    "lower-to-kernels": _lower_to_kernels,
    "lower-collectives": _lower_collectives,
}
