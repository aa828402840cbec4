"""Parsing distir programs from Python: the xDSL context with every dialect a distir
program uses (builtin, func, arith, math, dist, coll) and ``parse_module``.

    >>> from distir.dialects.parsing import parse_module
    >>> module = parse_module(open("examples/adam.mlir").read())

The command-line tools parse through ``tools/opt.py``'s ``LocatingParser`` instead, which
also reports where a failing op sits in the source.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.dialects.math import Math
from xdsl.parser import Parser

from distir.dialects.coll import Coll
from distir.dialects.dist import Dist


def distir_context() -> Context:
    """A fresh context with the builtin, func, arith, math, dist and coll dialects."""
    ctx = Context()
    for dialect in (Builtin, Func, Arith, Math, Dist, Coll):
        ctx.load_dialect(dialect)
    return ctx


def parse_module(text: str, name: str = "<input>", verify: bool = True) -> ModuleOp:
    """Parse (and by default verify) a module; raises xDSL's ``ParseError`` or
    ``VerifyException`` with the diagnostic."""
    module = Parser(distir_context(), text, name).parse_module()
    if verify:
        module.verify()
    return module
