# lit configuration for distir's FileCheck suite (test/<area>/*.mlir).
import os
import sys

import lit.formats

config.name = "distir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
# test/<area>/inputs/ holds programs that pytest suites read: no lit tests.
config.excludes = ["Output", "__pycache__", "lit.cfg.py", "inputs"]

# The tools live next to the interpreter running lit (the venv's bin/), which need not
# be on PATH when lit is started by absolute path.
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
# Under test_lit.py, the distir tools run in its warm server (support/zygote.py): their
# shims come first on PATH.
if os.environ.get("DISTIR_TOOL_SHIMS") and os.environ.get("DISTIR_ZYGOTE"):
    config.environment["PATH"] = os.environ["DISTIR_TOOL_SHIMS"] + os.pathsep + config.environment["PATH"]
    config.environment["DISTIR_ZYGOTE"] = os.environ["DISTIR_ZYGOTE"]
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%examples", os.path.join(os.path.dirname(config.test_source_root), "examples")))
