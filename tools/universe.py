"""Publishes distir's dialects and passes to xDSL tools (entry point ``xdsl.universe``),
so that stock ``xdsl-opt`` parses distir IR and runs distir passes."""

from xdsl.universe import Universe


def _dist():
    from distir.dialects.dist import Dist

    return Dist


def _coll():
    from distir.dialects.coll import Coll

    return Coll


def _nccl():
    from distir.dialects.nccl import Nccl

    return Nccl


def _rt():
    from distir.dialects.rt import Rt

    return Rt


def all_passes():
    from distir.passes import registry

    return registry.ALL_PASSES


DISTIR_DIALECTS = {"dist": _dist, "coll": _coll, "nccl": _nccl, "rt": _rt}

DISTIR_UNIVERSE = Universe(all_dialects=DISTIR_DIALECTS, all_passes=all_passes())
