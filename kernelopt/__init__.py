"""kernelopt: hardware-guided GPU kernel optimization.

Heavy packages (torch, triton, sentence-transformers) are imported lazily inside
the functions that need them, so importing kernelopt and running `kernelopt --help`
stays fast.
"""

__version__ = "0.1.0"
