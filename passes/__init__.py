"""distir.passes: the rewrite passes (one file per pass) and the schedule API.

Identities of the functional primitives (DESIGN §3): ``expand-collectives``,
``form-collectives``, ``cancel-primitives``, ``commute-maps``, ``fuse-maps``.
CoCoNet's transformations: ``split-allreduce``, ``reorder-allgather``,
``reorder-broadcast``, ``reorder-send``, ``fuse-allreduce``, ``fuse-collectives``,
``slice-state``, ``overlap``; canonicalization patterns for xDSL's ``canonicalize``
(``canonicalize.py``). ``registry.py`` names every layer's passes; ``pipeline.py`` parses and applies ``-p``
pipelines (``apply_pipeline``); ``support.py`` and ``fusion.py`` hold what several
passes share. The schedule API (``Schedule``) is ``tuning/schedule.py``.
"""
