"""Placements: how a distributed tensor is laid out along one mesh axis.

One small frozen attribute per placement, as PyTorch DTensor has one class per
placement. They print compactly, in the form used inside ``!dist.tensor`` types:

=============  ==================================================================
``replicated``  every rank of the axis holds the same full value (RepList)
``sliced<d>``   dim ``d`` is split in equal blocks, rank i holds block i (SlicedList);
                ``sliced<d, k>`` gives the nesting position ``k`` (0 = outermost)
                when several mesh axes slice the same dim
``local``       every rank holds its own full-shape value (Local, e.g. partial sums)
``at<r>``       only rank ``r`` of the axis holds the value (LocList_r)
``unplaced``    the logical value, held by no rank (List); exists only between
                functional primitives
=============  ==================================================================
"""

from __future__ import annotations

import functools
from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import IntAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from distir.dialects.format import parse_int

PLACEMENT_WORDS = ("replicated", "sliced", "local", "at", "unplaced")


class Placement(ParametrizedAttribute, ABC):
    """Base class of the placement attributes (one per mesh axis of a tensor type)."""

    @property
    def word(self) -> str:
        return self.name.removeprefix("dist.")

    def __str__(self) -> str:
        return self.word

    def print_parameters(self, printer: Printer) -> None:
        # Standalone form `#dist.sliced<0, 1>`; inside a tensor type: `sliced<0, 1>`.
        printer.print_string(str(self).removeprefix(self.word))


@irdl_attr_definition
class Replicated(Placement):
    """Every rank of the axis holds the same full value."""

    name = "dist.replicated"


@irdl_attr_definition
class Local(Placement):
    """Every rank of the axis holds its own full-shape value (e.g. partial sums)."""

    name = "dist.local"


@irdl_attr_definition
class Unplaced(Placement):
    """The logical value, held by no rank; only between functional primitives."""

    name = "dist.unplaced"


@irdl_attr_definition
class Sliced(Placement):
    """Tensor dim ``dim`` is split in equal blocks; rank i of the axis holds block i.

    ``order`` is the nesting position among the mesh axes slicing the same dim
    (0 = outermost block index); -1 means "by mesh-axis order", the default.
    """

    name = "dist.sliced"
    dim: IntAttr
    order: IntAttr

    def __init__(self, dim: int, order: int = -1):
        super().__init__(IntAttr(dim), IntAttr(order))

    def __str__(self) -> str:
        if self.order.data < 0:
            return f"sliced<{self.dim.data}>"
        return f"sliced<{self.dim.data}, {self.order.data}>"

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        args = _parse_int_args(parser, "sliced", 1, 2)
        return (IntAttr(args[0]), IntAttr(args[1] if len(args) == 2 else -1))


@irdl_attr_definition
class At(Placement):
    """Only rank ``rank`` of the axis holds the value."""

    name = "dist.at"
    rank: IntAttr

    def __init__(self, rank: int):
        super().__init__(IntAttr(rank))

    def __str__(self) -> str:
        return f"at<{self.rank.data}>"

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return (IntAttr(_parse_int_args(parser, "at", 1, 1)[0]),)


REPLICATED = Replicated()
LOCAL = Local()
UNPLACED = Unplaced()


@functools.lru_cache(maxsize=1024)
def sliced(dim: int, order: int = -1) -> Sliced:
    """``Sliced(dim, order)``, built (and verified) once: placements are immutable and
    the partitioner and the planner derive them by the hundred thousand on a model's
    program."""
    return Sliced(dim, order)


def _parse_int_args(parser: AttrParser, word: str, lo: int, hi: int) -> list[int]:
    args = parser.parse_comma_separated_list(
        parser.Delimiter.ANGLE, lambda: parse_int(parser), f" after '{word}'"
    )
    if not lo <= len(args) <= hi:
        want = f"{lo}" if lo == hi else f"{lo} or {hi}"
        parser.raise_error(f"'{word}' takes {want} integer argument(s), got {len(args)}")
    if any(a < 0 for a in args):
        parser.raise_error(f"'{word}' arguments must be non-negative")
    return args


def parse_placement(parser: AttrParser) -> Placement:
    """Parse one placement word: replicated | sliced<d[, k]> | local | at<r> | unplaced."""
    word = parser.parse_optional_identifier()
    if word is None or word not in PLACEMENT_WORDS:
        found = f"'{word}'" if word is not None else "something else"
        parser.raise_error(
            f"expected a placement ({', '.join(PLACEMENT_WORDS)}), got {found}"
        )
    if word == "replicated":
        return REPLICATED
    if word == "local":
        return LOCAL
    if word == "unplaced":
        return UNPLACED
    if word == "sliced":
        args = _parse_int_args(parser, word, 1, 2)
        return sliced(args[0], args[1] if len(args) == 2 else -1)
    (rank,) = _parse_int_args(parser, word, 1, 1)
    return At(rank)
