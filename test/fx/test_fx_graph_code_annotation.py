"""Graph code shows each node's user annotation, as upstream (PR 173119) does.

Verbose graph code -- GraphModule.print_readable(), and the TORCH_LOGS aot_graphs /
graph_code dumps printed through it -- starts a node's summary comment with
``Annotation: {...}`` when ``node.meta["custom"]`` is set; a value whose str() is
longer than 40 characters is cut to 40 characters and "...". The graphs are the
real forward and backward graphs AOTAutograd hands to its compilers under
torch.compile (graph_code_program.py, also run under upstream torch as the oracle).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import graph_code_program  # noqa: E402
from oracle_interpreter import oracle_json, requires_oracle, run_json  # noqa: E402

PROGRAM = HERE / "graph_code_program.py"
# 2.10 saves a detach of relu for the backward (2.5.1 detaches twice more in the
# backward) and writes no space before a summary's "#"; 2.11 also drops the blank last line.
NEWER_GRAPHS = torch.__version__ >= "2.10"  # TorchVersion: compares as a version


def without_locations(code: str) -> str:
    """The graph code with the program's path and line numbers left out of stack-trace
    summaries, and trailing blanks dropped, so the expectation survives edits elsewhere."""
    code = re.sub(r"File: \S*graph_code_program\.py:\d+ in", "File: graph_code_program.py in", code)
    return "\n".join(line.rstrip() for line in code.splitlines())


def log_dumps(stderr: str) -> dict:
    """{title: text} of the graph dumps in a TORCH_LOGS output; a dump starts with a
    "===== <title> =====" line, and every log line carries a "V1123 ... [0/0] [__graph_code]" prefix."""
    dumps, title = {}, None
    for line in stderr.splitlines():
        text = re.sub(r"^[A-Z]\d{4} [^\]]*\] (?:\[[^\]]*\] )*", "", line)
        if m := re.fullmatch(r"\s*===== (.+) =====\s*", text):
            title = m.group(1)
            dumps[title] = ""
        elif title is not None:
            dumps[title] += text + "\n"
    return dumps


class TestGraphCodeAnnotation(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.code = graph_code_program.graph_code()

    def test_forward_graph_code(self):
        code = without_locations(self.code["forward"])
        if NEWER_GRAPHS:
            self.assertExpectedInline(code.rstrip("\n"), """\
class GraphModule(torch.nn.Module):
    def forward(self, primals_1: "f32[4, 4]", primals_2: "f32[4]", primals_3: "f32[3, 4]", primals_4: "f32[2, 4]", primals_5: "f32[2]"):
        # Annotation: {'region': 'encoder', 'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...', 'ids': '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1...'} File: graph_code_program.py in forward, code: h = torch.relu(self.encoder(x))
        t: "f32[4, 4]" = torch.ops.aten.t.default(primals_1);  primals_1 = None
        addmm: "f32[3, 4]" = torch.ops.aten.addmm.default(primals_2, primals_3, t);  primals_2 = t = None
        relu: "f32[3, 4]" = torch.ops.aten.relu.default(addmm);  addmm = None
        detach: "f32[3, 4]" = torch.ops.aten.detach.default(relu)

        # Annotation: {'region': 'head'} File: graph_code_program.py in forward, code: out = self.head(h)
        t_1: "f32[4, 2]" = torch.ops.aten.t.default(primals_4);  primals_4 = None
        addmm_1: "f32[3, 2]" = torch.ops.aten.addmm.default(primals_5, relu, t_1);  primals_5 = None

        # File: graph_code_program.py in forward, code: return out.sum()
        sum_1: "f32[]" = torch.ops.aten.sum.default(addmm_1);  addmm_1 = None
        return (sum_1, primals_3, relu, detach, t_1)""")
            return
        self.assertExpectedInline(code, """\
class GraphModule(torch.nn.Module):
    def forward(self, primals_1: "f32[4, 4]", primals_2: "f32[4]", primals_3: "f32[3, 4]", primals_4: "f32[2, 4]", primals_5: "f32[2]"):
         # Annotation: {'region': 'encoder', 'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...', 'ids': '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1...'} File: graph_code_program.py in forward, code: h = torch.relu(self.encoder(x))
        t: "f32[4, 4]" = torch.ops.aten.t.default(primals_1);  primals_1 = None
        addmm: "f32[3, 4]" = torch.ops.aten.addmm.default(primals_2, primals_3, t);  primals_2 = t = None
        relu: "f32[3, 4]" = torch.ops.aten.relu.default(addmm);  addmm = None

         # Annotation: {'region': 'head'} File: graph_code_program.py in forward, code: out = self.head(h)
        t_1: "f32[4, 2]" = torch.ops.aten.t.default(primals_4);  primals_4 = None
        addmm_1: "f32[3, 2]" = torch.ops.aten.addmm.default(primals_5, relu, t_1);  primals_5 = None

         # File: graph_code_program.py in forward, code: return out.sum()
        sum_1: "f32[]" = torch.ops.aten.sum.default(addmm_1);  addmm_1 = None
        return (sum_1, primals_3, relu, t_1)
""")

    def test_backward_graph_code(self):
        code = without_locations(self.code["backward"])
        if NEWER_GRAPHS:
            code = code.replace("Backward of forward node: ", "")  # 2.14+ starts a backward node's stack trace so
            self.assertExpectedInline(code.rstrip("\n"), """\
class GraphModule(torch.nn.Module):
    def forward(self, primals_3: "f32[3, 4]", relu: "f32[3, 4]", detach: "f32[3, 4]", t_1: "f32[4, 2]", tangents_1: "f32[]"):
        # File: graph_code_program.py in forward, code: return out.sum()
        expand: "f32[3, 2]" = torch.ops.aten.expand.default(tangents_1, [3, 2]);  tangents_1 = None

        # Annotation: {'region': 'head'} File: graph_code_program.py in forward, code: out = self.head(h)
        t_2: "f32[2, 4]" = torch.ops.aten.t.default(t_1);  t_1 = None
        mm: "f32[3, 4]" = torch.ops.aten.mm.default(expand, t_2);  t_2 = None
        t_3: "f32[2, 3]" = torch.ops.aten.t.default(expand)
        mm_1: "f32[2, 4]" = torch.ops.aten.mm.default(t_3, relu);  t_3 = relu = None
        t_4: "f32[4, 2]" = torch.ops.aten.t.default(mm_1);  mm_1 = None
        sum_2: "f32[1, 2]" = torch.ops.aten.sum.dim_IntList(expand, [0], True);  expand = None
        view: "f32[2]" = torch.ops.aten.view.default(sum_2, [2]);  sum_2 = None
        t_5: "f32[2, 4]" = torch.ops.aten.t.default(t_4);  t_4 = None

        # Annotation: {'region': 'encoder', 'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...', 'ids': '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1...'} File: graph_code_program.py in forward, code: h = torch.relu(self.encoder(x))
        detach_1: "f32[3, 4]" = torch.ops.aten.detach.default(detach);  detach = None
        threshold_backward: "f32[3, 4]" = torch.ops.aten.threshold_backward.default(mm, detach_1, 0);  mm = detach_1 = None
        t_6: "f32[4, 3]" = torch.ops.aten.t.default(threshold_backward)
        mm_2: "f32[4, 4]" = torch.ops.aten.mm.default(t_6, primals_3);  t_6 = primals_3 = None
        t_7: "f32[4, 4]" = torch.ops.aten.t.default(mm_2);  mm_2 = None
        sum_3: "f32[1, 4]" = torch.ops.aten.sum.dim_IntList(threshold_backward, [0], True);  threshold_backward = None
        view_1: "f32[4]" = torch.ops.aten.view.default(sum_3, [4]);  sum_3 = None
        t_8: "f32[4, 4]" = torch.ops.aten.t.default(t_7);  t_7 = None
        return (t_8, view_1, None, t_5, view)""")
            return
        self.assertExpectedInline(code, """\
class GraphModule(torch.nn.Module):
    def forward(self, primals_3: "f32[3, 4]", relu: "f32[3, 4]", t_1: "f32[4, 2]", tangents_1: "f32[]"):
         # Annotation: {'region': 'encoder', 'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...', 'ids': '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1...'} File: graph_code_program.py in forward, code: h = torch.relu(self.encoder(x))
        detach: "f32[3, 4]" = torch.ops.aten.detach.default(relu)
        detach_1: "f32[3, 4]" = torch.ops.aten.detach.default(detach);  detach = None

         # File: graph_code_program.py in forward, code: return out.sum()
        expand: "f32[3, 2]" = torch.ops.aten.expand.default(tangents_1, [3, 2]);  tangents_1 = None

         # Annotation: {'region': 'head'} File: graph_code_program.py in forward, code: out = self.head(h)
        t_2: "f32[2, 4]" = torch.ops.aten.t.default(t_1);  t_1 = None
        mm: "f32[3, 4]" = torch.ops.aten.mm.default(expand, t_2);  t_2 = None
        t_3: "f32[2, 3]" = torch.ops.aten.t.default(expand)
        mm_1: "f32[2, 4]" = torch.ops.aten.mm.default(t_3, relu);  t_3 = relu = None
        t_4: "f32[4, 2]" = torch.ops.aten.t.default(mm_1);  mm_1 = None
        sum_2: "f32[1, 2]" = torch.ops.aten.sum.dim_IntList(expand, [0], True);  expand = None
        view: "f32[2]" = torch.ops.aten.view.default(sum_2, [2]);  sum_2 = None
        t_5: "f32[2, 4]" = torch.ops.aten.t.default(t_4);  t_4 = None

         # Annotation: {'region': 'encoder', 'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...', 'ids': '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1...'} File: graph_code_program.py in forward, code: h = torch.relu(self.encoder(x))
        detach_2: "f32[3, 4]" = torch.ops.aten.detach.default(detach_1);  detach_1 = None
        detach_3: "f32[3, 4]" = torch.ops.aten.detach.default(detach_2);  detach_2 = None
        threshold_backward: "f32[3, 4]" = torch.ops.aten.threshold_backward.default(mm, detach_3, 0);  mm = detach_3 = None
        t_6: "f32[4, 3]" = torch.ops.aten.t.default(threshold_backward)
        mm_2: "f32[4, 4]" = torch.ops.aten.mm.default(t_6, primals_3);  t_6 = primals_3 = None
        t_7: "f32[4, 4]" = torch.ops.aten.t.default(mm_2);  mm_2 = None
        sum_3: "f32[1, 4]" = torch.ops.aten.sum.dim_IntList(threshold_backward, [0], True);  threshold_backward = None
        view_1: "f32[4]" = torch.ops.aten.view.default(sum_3, [4]);  sum_3 = None
        t_8: "f32[4, 4]" = torch.ops.aten.t.default(t_7);  t_7 = None
        return (t_8, view_1, None, t_5, view)
""")

    def test_torch_logs_dumps_carry_annotations(self):
        env = dict(os.environ, TORCH_LOGS="aot_graphs,graph_code")
        proc = subprocess.run([sys.executable, str(PROGRAM)], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        dumps = log_dumps(proc.stderr)
        titles = sorted(dumps)
        self.assertEqual([t for t in titles if t.startswith(("Forward graph", "Backward graph"))],
                         ["Backward graph 0", "Forward graph 0"], titles)
        self.assertTrue(any(t.startswith("__compiled_fn") for t in titles), titles)
        for title, dump in dumps.items():
            with self.subTest(title):
                # 2.14+ starts a backward node's stack trace with "Backward of forward node: "
                self.assertRegex(dump, r"# Annotation: \{'region': 'head'\} (Backward of forward node: )?File:")
                self.assertIn("'plan': 'stage0:layerlayerlayerlayerlayerlayerlay...'", dump)


@requires_oracle
class TestGraphCodeAnnotationOracle(TestCase):
    def test_each_op_shows_the_annotation_upstream_shows(self):
        ours = run_json(sys.executable, PROGRAM)
        upstream = oracle_json(PROGRAM)
        self.assertEqual(ours["torch"], torch.__version__)  # the release under test, any of them
        self.assertTrue(upstream["torch"].startswith("2.13.0"), upstream["torch"])  # the oracle
        for graph in ("forward", "backward"):
            # 2.5.1 traces extra detach nodes in the backward; every other op is the same.
            keep = lambda rows: [tuple(r) for r in rows if r[0] != "torch.ops.aten.detach.default"]  # noqa: E731
            self.assertEqual(keep(ours[graph]), keep(upstream[graph]), graph)
            self.assertTrue(any(r[1] for r in ours[graph]), graph)


if __name__ == "__main__":
    run_tests()
