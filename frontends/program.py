"""One entry point for every tool: a program file in any accepted source form to a
partitioned, verified dist/coll module.

    module, spans = read_program(text, "prog.mlir", ctx)      # distir, sdy or shard text
    result = import_program(text, "prog.mlir", source="auto")  # + the partition remarks

The form is found by the dialects the text uses (outside comments and strings): MLIR's
``shard`` dialect (or ``mesh``, its name until 2025) is read by ``shard.py`` (its
programs may use StableHLO ops too); else StableHLO or Shardy ops and attributes
(``stablehlo.``, ``sdy.``, ``#sdy.sharding``, ``chlo.``) by ``sdy.py``; anything else is
distir IR (``dialects/frontend.py``). An imported program
is partitioned (``partition.py``) and verified before any tool sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span

from distir.dialects.diagnostics import PassProducedInvalidIR

if TYPE_CHECKING:  # the partitioner is imported with the first imported program: distir IR needs none of it
    from distir.frontends.partition import Remark

SOURCES = ("sdy", "shard", "auto")

# The start of an op or an attribute of each source dialect, after comments and strings
# are blanked out.
_SDY = re.compile(r'(?:^|[\s=("])(?:stablehlo|sdy|chlo|mhlo)\.[a-z_]|#sdy\.|#stablehlo[.<]', re.M)
_SHARD = re.compile(r'(?:^|[\s=("])(?:shard|mesh)\.(?:grid|mesh|sharding|shard|all_reduce|all_gather|all_slice|all_to_all|reduce_scatter|broadcast|gather|scatter|send|recv|shift|reduce|neighbors_halo|process_multi_index|process_linear_index|grid_shape|mesh_shape|shard_shape|get_sharding|update_halo)\b', re.M)
_BLANK = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')


def detect(text: str) -> str:
    """``sdy``, ``shard`` or ``distir``: which reader a text is for."""
    bare = _BLANK.sub(lambda m: " " * len(m.group()), text)
    if _SHARD.search(bare):
        return "shard"
    if _SDY.search(bare):
        return "sdy"
    return "distir"


@dataclass
class Imported:
    module: ModuleOp
    spans: dict[Operation, Span]
    remarks: list[Remark]
    source: str

    def remark_lines(self) -> list[str]:
        from distir.frontends.partition import format_remark

        return [format_remark(r, self.spans) for r in self.remarks]


def import_program(text: str, name: str, source: str = "auto") -> Imported:
    """Read ``text`` as ``source`` (``sdy``, ``shard`` or ``auto``), partition and verify
    it. Raises ``ParseError``/``VerifyException`` (located) or ``InputRejected``, and
    ``PassProducedInvalidIR`` when the partition breaks a program that verified (a bug
    in distir)."""
    from distir.dialects.verifier import verify_module
    from distir.frontends.partition import partition_module

    kind = detect(text) if source == "auto" else source
    if kind == "sdy":
        from distir.frontends.sdy import sdy_import

        module, spans = sdy_import(text, name)
    elif kind == "shard":
        from distir.frontends.shard import shard_import

        module, spans = shard_import(text, name)
    else:
        raise ParseError(Span(0, 1, Input(text, name)), "no StableHLO, Shardy (sdy) or MLIR shard ops in this input (for distir IR use distir-opt)")
    verify_module(module, spans)
    remarks = partition_module(module, spans)
    try:
        verify_module(module, spans)
    except VerifyException as e:  # the input verified: a partition that breaks it is a bug
        raise PassProducedInvalidIR("partition", str(e)) from None
    return Imported(module, spans, remarks, kind)


def read_program(
    text: str, name: str, ctx: Context, implicit_module: bool = True, verify: bool = False, line_offset: int = 0
) -> tuple[ModuleOp, dict[Operation, Span]]:
    """The module of a program file in any form: an imported program is partitioned and
    verified; distir IR is parsed (as ``parse_source`` does) and verified when ``verify``
    (diagnostics at lines after ``line_offset``). A tool verifies once: an imported
    program was verified by ``import_program`` after its partition (the tools verified
    it again, every op)."""
    if detect(text) == "distir":
        from distir.dialects.frontend import parse_source

        module, spans = parse_source(text, name, ctx, implicit_module)
        if verify:
            from distir.dialects.verifier import verify_module

            verify_module(module, spans, line_offset)
        return module, spans
    imported = import_program(text, name)
    return imported.module, imported.spans
