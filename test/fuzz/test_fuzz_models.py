"""Annotated real model code against upstream: HF transformers and timm models, every block in a region.

fuzz_models.py wraps each attention block of a tiny LLaMA, GPT-2, ViT (and each ResNet stage) in
``annotate`` and each MLP in an ``annotate_fn`` call; the fuzzer's observer runs a program under the
patched torch and under upstream and compares the ``custom`` and ``autograd_backward`` of every op that
both emit equally often (fuzz_compare.py), up to the documented rows of fuzz_documented.py.

Upstream is the 2.13 oracle (HF models; timm needs torchvision, which the oracle's CPU-only torch lacks)
and, on releases that trace annotations natively (2.13 and later), the release as shipped, timm
included. Each program compiles a real model on both sides (15-30 s on a core), so CI runs one per
comparison, on a few releases: against the 2.13 oracle on the reference release and on 2.9.1 (the last
release before annotation tracing started to land natively), against the release as shipped on 2.15.0 (the
newest upstream). ``bench/fuzz_annotations.py --models [--oracle pristine]`` runs every model program on any
release.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_compare import EQUAL  # noqa: E402
from fuzz_models import MODEL_PROGRAMS, needs_torchvision  # noqa: E402
from fuzz_run import TORCH_RELEASE, WORK, report, run  # noqa: E402
from oracle_interpreter import requires_oracle  # noqa: E402

AGAINST_ORACLE = ["hf_llama_sdpa/compile"]
AGAINST_ORACLE_ON = {"2.5.1", "2.9.1"}
AGAINST_SHIPPED_UPSTREAM = ["timm_resnet/compile"]
AGAINST_SHIPPED_UPSTREAM_ON = {"2.15.0"}  # from 2.13 on the release as shipped is upstream


class ModelComparison:
    PROGRAMS: list
    RELEASES: set

    @classmethod
    def runs_here(cls) -> bool:
        return TORCH_RELEASE in cls.RELEASES

    def setUp(self):
        super().setUp()
        if not self.runs_here():
            self.skipTest(f"runs on torch {', '.join(sorted(self.RELEASES))} (CI time); .venv holds {TORCH_RELEASE}")

    @classmethod
    def compare(cls, **kw):
        cls.verdicts, patched, oracle, seconds = run(cls.PROGRAMS, batch=len(cls.PROGRAMS), **kw)
        cls.table = report(cls.verdicts, patched, oracle, seconds, "test/fuzz/test_fuzz_models.py")
        print(cls.table)  # shown with pytest -s

    def test_every_op_both_sides_emit_carries_upstreams_annotation(self):
        self.assertEqual([(v.seed, v.cls) for v in self.verdicts if not v.explained], [], self.table)

    def test_the_models_ran_and_their_ops_were_compared(self):
        self.assertEqual([v.seed for v in self.verdicts], self.PROGRAMS)
        self.assertTrue(all(v.cls == EQUAL or v.differences for v in self.verdicts), self.table)
        self.assertGreater(sum(v.compared_ops for v in self.verdicts), sum(v.total_ops for v in self.verdicts) // 2)


class TestModelPrograms(TestCase):
    def test_every_model_program_is_annotated_code_that_builds(self):
        from fuzz_models import program

        for key in MODEL_PROGRAMS:
            source = program(key).source
            self.assertIn("fx_traceback.annotate(self.meta)", source)
            compile(source, key, "exec")

    def test_unknown_capture_is_refused(self):
        from fuzz_models import program

        with self.assertRaisesRegex(KeyError, "timm_vit runs under compile, export_strict"):
            program("timm_vit/make_fx")


@requires_oracle
class TestAnnotatedModelsAgainstUpstream(ModelComparison, TestCase):
    PROGRAMS = AGAINST_ORACLE
    RELEASES = AGAINST_ORACLE_ON

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        assert not any(map(needs_torchvision, cls.PROGRAMS))
        if cls.runs_here():
            cls.compare(work=WORK / "ci-models")


class TestAnnotatedModelsAgainstShippedUpstream(ModelComparison, TestCase):
    """The release as shipped is upstream from 2.13 on: the timm models compare against it."""

    PROGRAMS = AGAINST_SHIPPED_UPSTREAM
    RELEASES = AGAINST_SHIPPED_UPSTREAM_ON

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not cls.runs_here():
            return
        from differential_sides import pristine_python

        cls._tmp = tempfile.TemporaryDirectory()
        cls.compare(work=WORK / "ci-models-shipped", oracle_python=pristine_python(Path(cls._tmp.name)))

    @classmethod
    def tearDownClass(cls):
        if cls.runs_here():
            cls._tmp.cleanup()
        super().tearDownClass()


if __name__ == "__main__":
    run_tests()
