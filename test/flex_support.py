"""Where the tests can run flex_attention's backward.

torch >= 2.11 refuses flex_attention backward on CPU; the tests that need it run on a GPU where there is
one and skip, naming that reason, on a CPU-only machine.
"""
import unittest

import torch

FLEX_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FLEX_BACKWARD_REFUSED = FLEX_DEVICE == "cpu" and torch.__version__ >= "2.11"
skip_if_flex_backward_refused = unittest.skipIf(
    FLEX_BACKWARD_REFUSED, f"torch {torch.__version__} refuses flex_attention backward on CPU and there is no GPU here")
