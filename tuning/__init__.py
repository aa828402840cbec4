"""distir.tuning: deciding how to run a program.

``topology.py`` describes machines (levels with their links, the device; built-ins and
TOML files); ``collectives.py`` is the alpha-beta simulator of one collective on a
topology, shared by the tuner's cost model and P² synthesis (``distir.synthesis``).

``schedule.py`` is the Python schedule API (CoCoNet's scheduling language: ``Schedule``,
``PAPER_SCHEDULES``), which sits above the runtime because ``Schedule.check`` runs the
interpreter.

The autotuner (``distir-tune``): ``explore.py`` enumerates, names and checks a program's
schedules; ``sizes.py`` re-instantiates a program at other sizes; ``cost_model.py``
predicts a lowered program's time on a topology; ``timing.py`` measures it on a
backend; ``calibrate.py`` fits the ``local`` topology of this machine; ``tuner.py``
chains them.
"""

# ``local`` (and ``local-mpi``): this machine as ``distir-tune --calibrate`` fitted it,
# registered among the built-in topologies whenever the tuning package is imported.
from distir.tuning import calibrate as _calibrate  # noqa: E402, F401
