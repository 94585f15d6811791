"""Deprecated location: the run directory moved to `kernelopt.rundir` (report/ reads it and must
not import optimize/). This name is the same module object, for code written before the move."""

import sys

from kernelopt import rundir as _rundir

sys.modules[__name__] = _rundir
