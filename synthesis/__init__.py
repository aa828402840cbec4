"""distir.synthesis: P²'s parallelism placement and reduction-strategy synthesis, as
distir types and programs.

``matrices.py`` enumerates parallelism matrices (placements of parallelism axes on a
hardware hierarchy); ``hierarchy.py`` forms synthesis hierarchies and the device groups
of P²'s instructions; ``semantics.py`` is Fig. 8's semantics (device states as boolean
matrices); ``language.py`` enumerates the valid reduction programs; ``lower.py`` turns a
placement into a view mesh and a program into ``coll`` ops over its factor axes;
``simulate.py`` predicts a program's time on a topology (``tuning/collectives.py``);
``driver.py`` runs the whole synthesis for ``distir-synth``; the pass
``synthesize-reductions`` is ``synthesize_reductions.py``.
"""
