import os

# Triton kernels run on the CPU through the interpreter in CI; set before triton imports.
os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests never touch the user's experience database.
os.environ.setdefault("KERNELOPT_DB", os.path.join(os.path.dirname(__file__), ".pytest-experience.db"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
