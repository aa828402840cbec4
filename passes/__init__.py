"""distir.passes: the rewrite passes (one file per pass) and the schedule API.

Identities of the functional primitives (DESIGN §3): ``expand-collectives``,
``form-collectives``, ``cancel-primitives``, ``commute-maps``, ``fuse-maps``.
CoCoNet's transformations: ``split-allreduce``, ``reorder-allgather``,
``reorder-broadcast``, ``reorder-send``, ``fuse-allreduce``, ``fuse-collectives``,
``slice-state``, ``overlap``; canonicalization patterns for xDSL's ``canonicalize``
(``canonicalize.py``). ``registry.py`` names them all; ``schedule.py`` is the Python
schedule API (``Schedule``, ``apply_pipeline``, ``PAPER_SCHEDULES``); ``support.py`` and
``fusion.py`` hold what several passes share.
"""
