"""Regenerates every tests/ops/*.kir file: runs each family script of this
directory (every .py here but kirgen.py and this one), in name order.

    /usr/bin/python3 tests/ops/gen/all.py
"""

import glob
import os
import runpy

HERE = os.path.dirname(os.path.abspath(__file__))

for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
    if os.path.basename(path) not in ("kirgen.py", "all.py"):
        runpy.run_path(path, run_name="__main__")
