"""Parsing distir IR from Python: a context with every dialect distir programs use."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a context is made: xdsl-opt and distir-opt only need DISTIR_DIALECTS
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp


def _dist():
    from distir.dialects.dist import Dist

    return Dist


def _coll():
    from distir.dialects.coll import Coll

    return Coll


def _nccl():
    from distir.dialects.nccl import Nccl

    return Nccl


def _rt():
    from distir.dialects.rt import Rt

    return Rt


DISTIR_DIALECTS = {"dist": _dist, "coll": _coll, "nccl": _nccl, "rt": _rt}
"""distir's dialects by name, each imported when first used (also published to stock
``xdsl-opt`` by ``tools/universe.py``)."""


def make_context() -> Context:
    """A context with builtin, func, arith, math (with ``scalar.py``'s ops), memref, scf
    (lowered programs) and the distir dialects (dist, coll, nccl, rt)."""
    from xdsl.context import Context
    from xdsl.dialects import arith, builtin, func, math, memref, scf

    from distir.dialects.scalar import SCALAR_OPS

    ctx = Context()

    for d in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf):
        ctx.load_dialect(d)
    for op in SCALAR_OPS:  # arith/math ops xDSL does not define (dialects/scalar.py)
        ctx.load_op(op)
    for name, factory in DISTIR_DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx


def parse_module(text: str, name: str = "<string>", verify: bool = True) -> ModuleOp:
    """Parse (and by default verify) a distir module with the robust front end
    (``frontend.py``, ``verifier.py``); raises xDSL's ParseError or VerifyException,
    whose text is a located diagnostic, on bad input."""
    from distir.dialects.frontend import parse_source
    from distir.dialects.verifier import verify_module

    module, spans = parse_source(text, name, make_context())
    if verify:
        verify_module(module, spans)
    return module
