"""Parsing distir IR from Python: a context with every dialect distir programs use."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser


def make_context() -> Context:
    """A context with builtin, func, arith, math, memref, scf (lowered programs) and the
    distir dialects (dist, coll, nccl, rt)."""
    from distir.tools.universe import DISTIR_DIALECTS

    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf):
        ctx.load_dialect(d)
    for name, factory in DISTIR_DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx


def parse_module(text: str, name: str = "<string>", verify: bool = True) -> ModuleOp:
    """Parse (and by default verify) a distir module; raises xDSL's ParseError or
    VerifyException on bad input."""
    module = Parser(make_context(), text, name).parse_module()
    if verify:
        module.verify()
    return module
