"""Publishes distir's dialects and passes to xDSL tools (entry point ``xdsl.universe``),
so that stock ``xdsl-opt`` parses distir IR and runs distir passes."""

from xdsl.universe import Universe

from distir.dialects.context import DISTIR_DIALECTS
from distir.passes.registry import ALL_PASSES

DISTIR_UNIVERSE = Universe(all_dialects=DISTIR_DIALECTS, all_passes=ALL_PASSES)
