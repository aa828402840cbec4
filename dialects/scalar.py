"""The scalar ops of MLIR's ``arith`` and ``math`` dialects that ``dist.map`` bodies need
and xDSL 0.74 does not define, with MLIR's names, syntax and meaning (``make_context``
loads them beside xDSL's own ``arith`` and ``math`` ops):

* ``arith.remf %a, %b : f32``: the remainder of ``a / b`` truncated toward zero, with
  the sign of ``a`` (C's ``fmod``; exact in IEEE arithmetic): StableHLO's ``remainder``
  of floats.
* ``math.erfc %x : f32``: the complementary error function ``1 - erf(x)``, computed
  without the cancellation of ``1 - erf(x)`` for large ``x`` (exact GELU as JAX writes
  it: ``x * erfc(-x / sqrt(2)) / 2``).
"""

from __future__ import annotations

from xdsl.dialects.arith import FloatingPointLikeBinaryOperation
from xdsl.dialects.math import FloatingPointLikeUnaryMathOperation
from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure, SameOperandsAndResultType


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """``%r = arith.remf %a, %b : f32``: ``fmod(a, b)``."""

    name = "arith.remf"
    traits = traits_def(Pure())


@irdl_op_definition
class ErfcOp(FloatingPointLikeUnaryMathOperation):
    """``%r = math.erfc %x : f32``: ``1 - erf(x)``, accurate for large ``x``."""

    name = "math.erfc"
    traits = traits_def(Pure(), SameOperandsAndResultType())


SCALAR_OPS = (RemFOp, ErfcOp)
"""Loaded into every distir context."""
