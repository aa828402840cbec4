"""``fix-mesh-sizes{ranks=N}``: fix the ``?`` axis sizes of every mesh for a run on N
ranks, so that every rank-local shape is known. Lowered programs are written for one
rank count, as NCCL communicators are.

    dist.mesh @world shape = [?]      -- fix-mesh-sizes{ranks=4} -->     dist.mesh @world shape = [4]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, i64
from xdsl.passes import ModulePass

from distir.dialects import layout
from distir.dialects.dist import MeshOp
from distir.lowering.common import fail

PASS = "fix-mesh-sizes"


@dataclass(frozen=True)
class FixMeshSizesPass(ModulePass):
    name = "fix-mesh-sizes"

    REQUEST_DECIDES_VALIDITY: ClassVar[bool] = True
    """A program this pass leaves invalid (a sliced dim the ranks do not divide) is the
    request's fault, not a bug (``passes/pipeline.py``)."""

    ranks: int = 0
    """The rank count of the run (0: every mesh must already be static)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for mesh in [m for m in op.ops if isinstance(m, MeshOp)]:
            declared = mesh.declared_sizes
            if all(s is not None for s in declared):
                if mesh.parent_mesh() is None and self.ranks and layout.group_size(declared, range(len(declared))) != self.ranks:
                    fail(PASS, f"mesh @{mesh.mesh_name} of shape {layout.format_sizes(declared)} does not have {self.ranks} ranks", mesh)
                continue
            if self.ranks < 1:
                fail(PASS, f"mesh @{mesh.mesh_name} has size {layout.format_sizes(declared)}: give ranks=N", mesh)
            try:
                sizes = mesh.grid(self.ranks).sizes
            except layout.LayoutError as e:
                fail(PASS, f"{self.ranks} ranks do not fit mesh @{mesh.mesh_name}: {e}", mesh)
            mesh.shape = DenseArrayBase.from_list(i64, list(sizes))
