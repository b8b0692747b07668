"""Inductor's caches for tests that compile several programs and read their output code.

fresh_graphs(): a cache folder of its own and Inductor's in-process caches cleared when it starts (as
fresh_inductor_cache), the FX graph cache and the AOTAutograd cache off inside it, so every compile inside it
traces, partitions and generates its wrapper code anew, whatever compiled before it. Only the compiled
C++/Triton kernels are shared between the compiles inside it: a kernel whose source equals one built earlier
in the block (the same hash) is loaded, not built again. The kernels' sources are the release's codegen, the
same with kernel_annotations on or off (the flag writes the wrapper, not the kernels: test_kernel_annotations'
test_kernel_names_do_not_change), and their C++ build was most of each compile's time on CI (about 17 s of
CPU of the 18 s of a training step of the annotated block, 2.5.1; the two steps after the first of a block
now take under 1 s each).
"""
from contextlib import contextmanager

from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache


@contextmanager
def fresh_graphs():
    with (
        fresh_inductor_cache(),
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        yield
