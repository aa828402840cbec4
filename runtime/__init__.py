"""distir.runtime: executes programs.

* ``interpret(module, func, inputs, ranks, seed=0)`` -> logical outputs, and
  ``run_function(...)`` -> ``Execution`` (outputs, per-rank results, allocation
  statistics): the reference interpreter (``interpreter.py``).
* ``equivalent(module_a, module_b, ranks, trials=3, seed=0, ...)`` ->
  ``EquivalenceReport`` (``equivalence.py``).
* ``npz.py``: the input/output conventions shared by the backends; ``backend.py``: the
  backend interface and registry (``interpret``, ``local``, ``mpi``, ``nccl``).
"""

from distir.runtime.equivalence import EquivalenceReport, equivalent
from distir.runtime.interpreter import Execution, interpret, run_function

__all__ = ["EquivalenceReport", "Execution", "equivalent", "interpret", "run_function"]
