"""Optimizers and the loop that runs them (see kernelopt.optimize.base for the protocol)."""

# What `optimize` and `suite run` use unless told otherwise (no LLM). `strategies` applies the packs'
# source transforms, then tunes knobs with the knob search; on the whole suite (4 H200s, one session,
# benchmarks/results/session11_gpu/) it was never more than 2 % slower than `knobs` and up to 10.6x
# faster (geomean 0.99x of torch.compile against 0.74x). Kept here, light, for the CLI's --help.
DEFAULT_OPTIMIZER = "strategies"
