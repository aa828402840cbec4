"""All distir passes by name (kebab-case), as factories returning the pass class."""

from collections.abc import Callable

from xdsl.passes import ModulePass

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {}
