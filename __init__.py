"""distir: distributed machine-learning programs as one IR of computation and communication.

Subpackages: ``dialects`` (dist, coll), ``passes``, ``lowering``, ``runtime``, ``tools``.
"""

__version__ = "0.1.0"
