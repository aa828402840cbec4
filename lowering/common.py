"""Helpers shared by the lowering passes: diagnostics, meshes with fixed sizes, rank-local
buffer types."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NoReturn

from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import PassFailedException

from distir.dialects import layout
from distir.dialects.dist import MeshOp, TensorType


class LoweringError(PassFailedException):
    """A program the lowering cannot handle; the message names the op and the reason,
    ``op`` is that op (the pass manager locates the diagnostic at it)."""

    op: Operation | None = None


def fail(pass_name: str, msg: str, op: Operation | None = None) -> NoReturn:
    where = f"'{op.name}' op " if op is not None else ""
    err = LoweringError(f"'{pass_name}' pass: {where}{msg}")
    err.op = op
    raise err


def meshes(module: ModuleOp) -> dict[str, MeshOp]:
    return {op.mesh_name: op for op in module.ops if isinstance(op, MeshOp)}


def static_sizes(pass_name: str, mesh: MeshOp) -> tuple[int, ...]:
    """The mesh's axis sizes, all known; a diagnostic when one is still ``?``."""
    sizes = mesh.sizes()
    if any(s is None for s in sizes):
        fail(
            pass_name,
            f"mesh @{mesh.mesh_name} has size {layout.format_sizes(sizes)}: fix the rank count first "
            f"with 'fix-mesh-sizes{{ranks=N}}' (the default lowering pipeline does)",
        )
    return sizes  # type: ignore[return-value]


def group_size(sizes: Sequence[int], axes: Sequence[int]) -> int:
    return math.prod(sizes[a] for a in axes)


def local_shape(t: TensorType, sizes: Sequence[int]) -> tuple[int, ...]:
    return layout.local_shape(t.get_shape(), t.get_placements(), sizes)


def buffer_type(t: Attribute, sizes: Sequence[int] | None) -> Attribute:
    """The rank-local type of a value: a memref of the local shape for a tensor, the
    scalar type itself for a builtin scalar."""
    if isinstance(t, TensorType):
        assert sizes is not None
        return _memref(t, tuple(sizes))
    return t


@functools.lru_cache(maxsize=65536)
def _memref(t: TensorType, sizes: tuple[int, ...]) -> MemRefType:
    """The memref of a tensor type's local block (attributes are immutable: one per
    type and mesh sizes; a model's program asks for the same few thousand many times)."""
    return MemRefType(t.element_type, local_shape(t, sizes))
