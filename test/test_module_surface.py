"""The module surface of every torch module the installed series patches: the
release's names stay, the series adds only the names listed here.

Code written against the pristine release imports names from these modules
(``from torch.fx.experimental.proxy_tensor import ORIGINAL_ATEN``, reads
``torch.fx.traceback.current_meta``), so a patch must not remove or retype one.
The release's source of each patched module is its saved original (the
overlay keeps them under ``torch-*.dist-info/overlay/``), read with ``ast``.

What counts as a name: what the module's top level binds with ``def``,
``class``, an assignment or ``from ... import`` (a re-export a consumer may
import). ``import x`` binds a module the code uses, not part of its surface: a
patch that drops its last use drops the import too (as upstream's linter asks).
An addition is a public name a ``def``, ``class`` or assignment binds; adding
an import changes nothing a consumer sees.
Like upstream's test/test_public_bindings.py, but against the release.

Every other name the series adds is one upstream's module has too, or a private helper of the series' own
code listed with its patch (test/differential/documented_differences.py, which the no-annotation
differential's ``dir()`` comparison reads as well): a helper imports what it needs inside the function that
uses it, so no module gains an imported name upstream's lacks, except the few module-level imports listed
with their patch in ``LOCAL_MODULE_IMPORTS`` (a helper that runs per node imports at module level, as a
reviewer asks).
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

from torch_overlay.installation import TorchInstallation
from torch_overlay.pristine import from_installation
from torch_overlay.series import default_patches_root, load_series

sys.path.insert(0, str(Path(__file__).resolve().parent / "differential"))
from documented_differences import (  # noqa: E402
    DROPPED_STATE, LOCAL_MODULE_IMPORTS, LOCAL_PRIVATE_NAMES, UPSTREAM_MODULE_NAMES,
)

# Public names a patch adds to a module of the release: (module file, name) -> the patches that add it
# (one of them is in each series whose release lacks the name).
DOCUMENTED_ADDITIONS = {
    ("torch/fx/traceback.py", "annotate"): ("163673-annotate",),
    ("torch/fx/traceback.py", "annotate_fn"): ("163673-annotate",),
    ("torch/fx/traceback.py", "GRADIENT_ACC_SPECIAL_STACK"): ("180251-autograd-backward-state",),
    ("torch/fx/traceback.py", "current_replay_node"): ("166200-view-replay-annotation",),
    ("torch/fx/traceback.py", "get_current_replay_node"): ("166200-view-replay-annotation",),
    ("torch/fx/traceback.py", "set_current_replay_node"): ("166200-view-replay-annotation",),
    ("torch/_dynamo/variables/__init__.py", "FxTracebackAnnotateVariable"): ("164916-dynamo-annotate",),
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable"): ("164916-dynamo-annotate",),
    ("torch/_dynamo/config.py", "trace_under_caller_annotation"): ("local-dynamo-ambient-annotation",),
    ("torch/autograd/graph.py", "region_activation_memory_budget"): ("185979-region-memory-budget",),
    ("torch/fx/traceback.py", "MEMORY_BUDGET_ANNOTATION_KEY"): ("185979-region-memory-budget",),
    ("torch/_inductor/config.py", "kernel_annotations"): ("local-inductor-kernel-annotations",),
}

LITERAL_TYPES = (type(None), bool, int, float, str, dict, list, tuple, set)


class Binding:
    """A top-level name of a module's source: how it is bound, and whether on every path."""

    def __init__(self, how: str, unconditional: bool, value: ast.AST | None = None):
        self.how = how  # "def", "class", "assign", "from-import", "import"
        self.unconditional = unconditional
        self.value = value  # the assigned expression, for "assign"


def assigned_names(target: ast.AST) -> list[str]:
    """The names an assignment target binds (``a``, ``a, (b, *c)``; not ``a.b`` or ``a[0]``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in assigned_names(elt)]
    if isinstance(target, ast.Starred):
        return assigned_names(target.value)
    return []


def top_level_bindings(source: str) -> dict[str, Binding]:
    """Every name the module's top level binds (the last binding wins). Names bound
    under ``if``/``try`` are conditional; an ``if TYPE_CHECKING:`` block binds nothing."""
    found: dict[str, Binding] = {}

    def visit(statements, unconditional):
        for s in statements:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[s.name] = Binding("def", unconditional)
            elif isinstance(s, ast.ClassDef):
                found[s.name] = Binding("class", unconditional)
            elif isinstance(s, ast.Assign):
                for target in s.targets:
                    for name in assigned_names(target):
                        found[name] = Binding("assign", unconditional, s.value if isinstance(target, ast.Name) else None)
            elif isinstance(s, (ast.AnnAssign, ast.AugAssign)) and isinstance(s.target, ast.Name):
                if s.value is not None:
                    found[s.target.id] = Binding("assign", unconditional, s.value)
            elif isinstance(s, ast.Import):
                for a in s.names:
                    found[(a.asname or a.name).split(".")[0]] = Binding("import", unconditional)
            elif isinstance(s, ast.ImportFrom):
                for a in s.names:
                    if a.name != "*":
                        found[a.asname or a.name] = Binding("from-import", unconditional)
            elif isinstance(s, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(s.test):
                    visit(s.body, False)
                    visit(s.orelse, False)
            elif isinstance(s, ast.Try):
                visit(s.body, False)
                for handler in s.handlers:
                    visit(handler.body, False)
                visit(s.orelse, False)
                visit(s.finalbody, unconditional)
            elif isinstance(s, ast.With):
                visit(s.body, unconditional)

    visit(ast.parse(source).body, True)
    return found


def dunder_all(source: str) -> list[str] | None:
    """The module's literal ``__all__`` (None when it has none or builds it)."""
    for s in ast.parse(source).body:
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                try:
                    return list(ast.literal_eval(s.value))
                except ValueError:
                    return None
    return None


def module_name(path: str) -> str:
    name = path[: -len(".py")].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


class PatchedModule:
    def __init__(self, path: str, pristine: str, patched: str):
        self.path = path
        self.pristine = pristine
        self.patched = patched
        self.name = module_name(path)

    @property
    def module(self):
        return importlib.import_module(self.name)


def patched_modules() -> list[PatchedModule]:
    """The Python modules of the release that the installed series changes."""
    inst = TorchInstallation.of_running_interpreter()
    state = inst.applied_state()
    if not state:
        raise AssertionError(f"torch {inst.version} at {inst.site} has no overlay applied; "
                             "run 'torch-overlay apply' (scripts/test.sh does)")
    created = load_series(inst.release).created
    read_release = from_installation(inst, inst.release)
    return [PatchedModule(path, read_release(path).decode(), (inst.site / path).read_text())
            for path in sorted(state["files"]) if path.endswith(".py") and path not in created]


def adds_binding(patch_text: str, path: str, name: str) -> bool:
    """Whether the patch's diff of ``path`` has an added line that binds ``name`` at top
    level, imports it, or lists it (in ``__all__``)."""
    diffs = re.split(r"^diff --git ", patch_text, flags=re.M)
    body = next((d for d in diffs if d.startswith(f"a/{path} ")), "")
    n = re.escape(name)
    added = re.compile(rf"^\+(?:(?:async )?def |class ){n}\b|^\+{n}\s*(?::[^=]*)?="
                       rf"|^\+.*\bimport\b.*\b{n}\b|^\+.*[\"']{n}[\"']", re.M)
    return bool(added.search(body))


class TestModuleSurface(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.modules = patched_modules()
        cls.series = load_series(TorchInstallation.of_running_interpreter().release)

    def test_series_patches_the_modules_this_test_reads(self):
        self.assertIn("torch/fx/traceback.py", [m.path for m in self.modules])

    def test_every_name_of_the_release_is_there(self):
        for m in self.modules:
            patched_names = top_level_bindings(m.patched)
            module = m.module
            for name, b in top_level_bindings(m.pristine).items():
                if b.how == "import" or name.startswith("__"):
                    continue
                with self.subTest(module=m.name, name=name):
                    if f"{m.name}.{name}" in DROPPED_STATE:
                        # dead state a patch removes (a reviewer's request), listed with that patch
                        self.assertFalse(hasattr(module, name), f"{m.name}.{name} is listed as dropped: unlist it")
                        continue
                    if b.unconditional:
                        self.assertTrue(hasattr(module, name),
                                        f"{m.name}.{name} ({b.how} in the release) is missing")
                    else:
                        self.assertTrue(name in patched_names or hasattr(module, name),
                                        f"{m.name}.{name} (bound conditionally in the release) is missing")

    def test_every_name_of_the_release_keeps_its_kind(self):
        for m in self.modules:
            module = m.module
            for name, b in top_level_bindings(m.pristine).items():
                if not b.unconditional or name.startswith("_") or not hasattr(module, name):
                    continue
                value = getattr(module, name)
                with self.subTest(module=m.name, name=name):
                    if b.how == "def":
                        self.assertTrue(callable(value), f"{m.name}.{name} was a function")
                    elif b.how == "class":
                        if type(value).__name__ == "SubConfigProxy":
                            # a config module (torch._inductor.config): install_config_module turns its nested
                            # classes into proxies of their options, on the pristine release as well
                            continue
                        self.assertIsInstance(value, type, f"{m.name}.{name} was a class")
                    elif b.how == "assign" and b.value is not None:
                        try:
                            literal = ast.literal_eval(b.value)
                        except ValueError:
                            continue
                        if isinstance(literal, LITERAL_TYPES):
                            self.assertIs(type(value), type(literal),
                                          f"{m.name}.{name} was a {type(literal).__name__}")

    def test_dunder_all_of_the_release_is_kept(self):
        for m in self.modules:
            before, after = dunder_all(m.pristine), dunder_all(m.patched)
            if before is None:
                continue
            with self.subTest(module=m.name):
                self.assertEqual([n for n in before if n not in (after or [])], [])
                for name in [n for n in after if n not in before]:
                    self.assertIn((m.path, name), DOCUMENTED_ADDITIONS, f"{m.name}.__all__ gains {name}")

    def test_every_added_name_is_documented_and_added_by_its_patch(self):
        applied = {p.name[: -len(".patch")]: p for p in self.series.patches}
        for m in self.modules:
            before = top_level_bindings(m.pristine)
            for name, b in top_level_bindings(m.patched).items():
                if name in before or name.startswith("_") or b.how in ("import", "from-import"):
                    continue
                with self.subTest(module=m.name, name=name):
                    self.assertIn((m.path, name), DOCUMENTED_ADDITIONS,
                                  f"{m.name}.{name} is added by the series but not listed in DOCUMENTED_ADDITIONS")
                    patches = [applied[p] for p in DOCUMENTED_ADDITIONS[(m.path, name)] if p in applied]
                    self.assertTrue(patches, f"none of {DOCUMENTED_ADDITIONS[(m.path, name)]} is in the "
                                             f"torch {torch.__version__} series, yet {m.name}.{name} is added")
                    self.assertTrue(any(adds_binding(p.path.read_text(), m.path, name) for p in patches),
                                    f"{[p.name for p in patches]} do not add {name} to {m.path}")

    def test_each_documented_addition_is_made_by_a_listed_patch_of_some_series(self):
        root = default_patches_root()
        for (path, name), patch_names in DOCUMENTED_ADDITIONS.items():
            with self.subTest(path=path, name=name):
                files = [f for p in patch_names for f in root.glob(f"*/{p}.patch")]
                self.assertTrue(any(adds_binding(f.read_text(), path, name) for f in files),
                                f"no series' {patch_names} adds {name} to {path}: drop the entry")

    def test_every_other_added_name_is_upstreams_or_a_listed_private_helper(self):
        """Issue 20 item 5: a name in ``dir()`` of a touched module that neither the release nor upstream has is a
        private helper of a patch, listed with that patch; an import of anything else belongs in the function."""
        applied = {p.name[: -len(".patch")]: p for p in self.series.patches}
        for m in self.modules:
            before = top_level_bindings(m.pristine)
            for name, b in top_level_bindings(m.patched).items():
                imported = b.how in ("import", "from-import")
                if name in before or name.startswith("__") or not (imported or name.startswith("_")):
                    continue  # a public def, class or assignment: the test above
                qualified = f"{m.name}.{name}"
                if qualified in UPSTREAM_MODULE_NAMES:
                    continue
                with self.subTest(module=m.name, name=name):
                    if imported and qualified in LOCAL_MODULE_IMPORTS:
                        patches = [applied[p] for p in LOCAL_MODULE_IMPORTS[qualified] if p in applied]
                        self.assertTrue(any(adds_binding(p.path.read_text(), m.path, name) for p in patches),
                                        f"none of {LOCAL_MODULE_IMPORTS[qualified]} in the torch "
                                        f"{torch.__version__} series imports {name} into {m.path}")
                        continue
                    self.assertFalse(imported, f"the series imports {name} into {m.name}, which upstream's module "
                                               "does not: import it inside the function that needs it")
                    self.assertIn(qualified, LOCAL_PRIVATE_NAMES,
                                  f"{qualified} is added by the series but not listed in LOCAL_PRIVATE_NAMES")
                    patches = [applied[p] for p in LOCAL_PRIVATE_NAMES[qualified] if p in applied]
                    self.assertTrue(any(adds_binding(p.path.read_text(), m.path, name) for p in patches),
                                    f"none of {LOCAL_PRIVATE_NAMES[qualified]} in the torch {torch.__version__} "
                                    f"series adds {name} to {m.path}")

    def test_each_listed_private_helper_is_private_and_made_by_its_patch_in_some_series(self):
        """The allow-list holds no public name and no stale entry."""
        root = default_patches_root()
        for qualified, patch_names in LOCAL_PRIVATE_NAMES.items():
            module, name = qualified.rsplit(".", 1)
            paths = [module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"]
            with self.subTest(name=qualified):
                self.assertTrue(name.startswith("_") and not name.startswith("__"), f"{qualified} is public")
                files = [f for p in patch_names for f in root.glob(f"*/{p}.patch")]
                self.assertTrue(any(adds_binding(f.read_text(), path, name) for f in files for path in paths),
                                f"no series' {patch_names} adds {name} to {module}: drop the entry")

    def test_each_listed_module_import_is_made_by_its_patch_in_some_series(self):
        """No stale entry in the list of the series' own module-level imports."""
        root = default_patches_root()
        for qualified, patch_names in LOCAL_MODULE_IMPORTS.items():
            module, name = qualified.rsplit(".", 1)
            with self.subTest(name=qualified):
                files = [f for p in patch_names for f in root.glob(f"*/{p}.patch")]
                self.assertTrue(any(adds_binding(f.read_text(), module.replace(".", "/") + ".py", name)
                                    for f in files), f"no series' {patch_names} imports {name}: drop the entry")


if __name__ == "__main__":
    run_tests()
