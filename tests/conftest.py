import os

import shutil

# Without a GPU (CI), Triton kernels run on the CPU through the interpreter; set before
# triton imports. On a GPU host tests/gpu must compile real kernels, so leave it unset.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests never touch the user's experience database.
os.environ.setdefault("KERNELOPT_DB", os.path.join(os.path.dirname(__file__), ".pytest-experience.db"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
