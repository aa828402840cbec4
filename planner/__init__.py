"""``distir-plan``: the mesh, the placement of every value, the reduction programs and the
schedule of a program for a cluster, chosen together (``plan.py`` is the driver; the
search is ``ilp.py``; ``docs/plan.md`` is the guide)."""
