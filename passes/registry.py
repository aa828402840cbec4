"""All distir passes by name (kebab-case), as factories returning the pass class.

Read by ``distir-opt`` and published to stock ``xdsl-opt`` through the ``xdsl.universe``
entry point (``tools/universe.py``). ``canonicalize`` is xDSL's own pass: it applies the
canonicalization patterns that the ``dist``/``coll`` ops declare (``passes/canonicalize.py``).
"""

from collections.abc import Callable

from xdsl.passes import ModulePass


def _expand_collectives():
    from distir.passes.expand_collectives import ExpandCollectivesPass

    return ExpandCollectivesPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "expand-collectives": _expand_collectives,
}


def _form_collectives():
    from distir.passes.form_collectives import FormCollectivesPass

    return FormCollectivesPass


ALL_PASSES["form-collectives"] = _form_collectives
