"""``torch-overlay report``: a self-contained page of the annotated graphs a user's script compiles.

One module per concern, each depending only on those listed before it:

- ``capture``: the hook that records every graph torch.compile hands to AOTAutograd, as plain rows;
- ``model``: what the page says about those rows (regions, forward/backward pairs, coverage);
- ``profile``: with ``--profile``, the run under the profiler and the time per region of its steps;
- ``svg``: the region picture and the time-per-region chart, inline SVG;
- ``html``: the page itself, inline CSS, no script;
- ``command``: running the script unchanged (torchrun ranks included) and writing the page.

Only ``command`` is imported here; it imports the others (and torch) when a report is made, so
``torch-overlay --help`` stays fast.
"""
from __future__ import annotations

from .command import main, output_path, rank_info, run_script, split_trailing_options

__all__ = ["main", "output_path", "rank_info", "run_script", "split_trailing_options"]
