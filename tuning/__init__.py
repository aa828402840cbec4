"""distir.tuning: deciding how to run a program.

``topology.py`` describes machines (levels with their links, the device; built-ins and
TOML files); ``collectives.py`` is the alpha-beta simulator of one collective on a
topology, shared by the tuner's cost model and P² synthesis (``distir.synthesis``).

``schedule.py`` is the Python schedule API (CoCoNet's scheduling language: ``Schedule``,
``PAPER_SCHEDULES``), which sits above the runtime because ``Schedule.check`` runs the
interpreter.
"""

# ``local`` (and ``local-mpi``): this machine as ``distir-tune --calibrate`` fitted it,
# registered among the built-in topologies whenever the tuning package is imported.
from distir.tuning import calibrate as _calibrate  # noqa: E402, F401
