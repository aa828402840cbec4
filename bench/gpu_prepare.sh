#!/usr/bin/env bash
# Prepares what the GPU machine lacks for bench/gpu_check.py (docs/runtime.md, "A GPU
# check"): that machine has no network and Python 3.12 with torch, numba-cuda, cupy, jax,
# mpi4py, NCCL, scipy and pytest, but not distir, xDSL or nccl4py. This script writes,
# into gpu_wheels/ (ignored by git; carried with the checkout, at most 64 MiB):
#   - the wheel of this checkout (distir itself);
#   - cp312 manylinux x86-64 wheels of the other packages distir needs there, at the
#     versions installed in this environment (the ones its tests ran with).
# There: pip install --no-index --no-deps --target /tmp/site gpu_wheels/*.whl
#        PYTHONPATH=/tmp/site python bench/gpu_check.py -o "$OUT/gpu_check.md"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_wheels}
rm -rf "$out"
mkdir -p "$out"

rm -rf build   # setuptools builds in the tree: no stale build/lib in the wheel, none left behind
python -m pip wheel --quiet --no-deps --no-build-isolation --no-index -w "$out" .
rm -rf build

# distir's requirements the GPU machine's image does not have, and theirs
NEEDED="xdsl immutabledict ordered-set nccl4py cuda-core cuda-pathfinder platformdirs rich markdown-it-py mdurl pygments tqdm psutil"
pins=$(python - $NEEDED <<'PY'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
PY
)
# shellcheck disable=SC2086
python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" $pins

size=$(du -sm "$out" | cut -f1)
echo "gpu_prepare: $(ls "$out" | wc -l) wheels, ${size} MiB in $out/"
if [ "$size" -gt 56 ]; then
  echo "gpu_prepare: more than 56 MiB: with the checkout it may not fit the 64 MiB a device run carries" >&2
  exit 1
fi
