"""Where the tests can run flex_attention's backward.

torch >= 2.11 refuses flex_attention backward on CPU; the tests that need it run on a GPU where there is
one and skip, naming that reason, on a CPU-only machine. The rule is the demo's (torch_overlay.demo).
"""
import unittest

import torch

from torch_overlay.demo import flex_device

FLEX_DEVICE = flex_device() or "cpu"
FLEX_BACKWARD_REFUSED = flex_device() is None
skip_if_flex_backward_refused = unittest.skipIf(
    FLEX_BACKWARD_REFUSED, f"torch {torch.__version__} refuses flex_attention backward on CPU and there is no GPU here")
