"""The collectives of the ``coll`` dialect, one module per collective.

``base.py`` holds the descriptor interface every collective implements (its op class
is its descriptor) and the registry that the layers above iterate. Each module's op
docstring states the collective's definition in the functional primitives, the
placement change on the axes it acts on (DTensor's transition table, one row per
module), an IR example and what each rank holds before and after.

To add a collective: write its module (an op class registered with ``@collective``;
see ``base.py``) and import it in ``dialects/coll.py``. It then parses, prints,
verifies, runs in the interpreter, expands into primitives when it is a composition of
them, lowers to ``nccl``/``rt`` calls (and so runs on every backend and is timed by the
cost model) and has a name in the tuner's schedules. ``docs/collectives.md`` walks
through it.
"""
