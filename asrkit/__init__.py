"""asrkit: a plugin-based toolkit for training end-to-end speech recognisers on TensorFlow 2.

The public API is :mod:`asrkit.api` (docs/api.md); ``hookimpl`` and ``AsrkitError`` are also
here, for plugins written before it.
Importing this package is cheap on purpose: TensorFlow is imported only by the functions that
compute with it, so ``asrkit --help`` and ``asrkit plugins`` answer at once.
"""

import os

from asrkit.core.errors import AsrkitError
from asrkit.hookspecs import hookimpl

# TensorFlow reads these when it is first imported, which asrkit always does later and lazily.
# oneDNN is off by default on AMD CPUs although it makes training 1.3x faster there
# (``benchmarks/bench_train.py`` measures it; docs/cli.md, "Environment", lists both
# variables); TensorFlow's C++ start-up chatter (even harmless "errors" about CUDA on a
# machine without a GPU) would bury asrkit's own output.
# A user's own setting of either variable wins.
#: Whether TF_CPP_MIN_LOG_LEVEL is the user's own: then ``-v`` leaves it as it is
#: (:func:`asrkit.cli.configure_tensorflow_logging`).
TF_LOG_LEVEL_FROM_USER = "TF_CPP_MIN_LOG_LEVEL" in os.environ
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"

__all__ = ["AsrkitError", "__version__", "hookimpl"]
