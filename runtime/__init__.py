"""distir.runtime: executes programs.

* ``interpret(module, func, inputs, ranks, seed=0)`` -> logical outputs, and
  ``run_function(...)`` -> ``Execution`` (outputs, per-rank results, allocation
  statistics): the reference interpreter (``interpreter.py``).
* ``equivalent(module_a, module_b, ranks, trials=3, seed=0, ...)`` ->
  ``EquivalenceReport`` (``equivalence.py``).
* ``npz.py``: the input/output conventions shared by the backends; ``backend.py``: the
  backend interface and registry; ``rng.py``: dropout's counter-based generator.
"""

from distir.runtime.equivalence import EquivalenceReport, equivalent
from distir.runtime.interpreter import Execution, interpret, run_function

__all__ = ["EquivalenceReport", "Execution", "equivalent", "interpret", "run_function"]

from distir.runtime import backends as _backends  # noqa: E402,F401 - registers local, mpi, nccl
