"""patches/<release>/series: releases in version order, the nearest release named, patches stored once."""
from __future__ import annotations

import shutil

import pytest

from source_fixtures import patches_copy
from torch_overlay.behaviours import behaviours, native_release
from torch_overlay.errors import OverlayError
from torch_overlay.series import (default_patches_root, load_series, nearest_supported, release_key, series_using,
                                  supported_versions)

SUPPORTED = ["2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0"]


@pytest.fixture
def root(tmp_path):
    root = patches_copy(tmp_path / "patches")
    for folder in root.iterdir():  # the reference release's series, and an empty one for each other
        if folder.is_dir() and folder.name != "2.5.1":
            shutil.rmtree(folder)
    for version in SUPPORTED[1:]:
        (root / version).mkdir()
        (root / version / "series").write_text("# empty\n")
    return root


def test_supported_releases_are_in_version_order(root):
    (root / "notes").mkdir()
    (root / "notes" / "series").write_text("")  # not a release
    assert supported_versions(root) == SUPPORTED


@pytest.mark.parametrize("version, sentence, install", [
    ("2.7.0", "torch 2.7.1 is the supported release of 2.7", "2.7.1"),
    ("2.9.0", "torch 2.9.1 is the supported release of 2.9", "2.9.1"),
    ("2.10.1", "torch 2.10.0 is the supported release of 2.10", "2.10.0"),
    ("2.4.1", "the oldest supported release is 2.5.1", "2.5.1"),
    ("2.13.0", "the newest supported release is 2.10.0", "2.10.0"),
])
def test_a_release_without_a_series_is_pointed_to_the_nearest(root, version, sentence, install):
    assert nearest_supported(version, SUPPORTED) == (sentence, install)
    with pytest.raises(OverlayError) as info:
        load_series(version, root)
    assert info.value.what == (f"torch-overlay has no patch series for torch {version} "
                               f"(supported: {', '.join(SUPPORTED)})")
    assert info.value.todo == f"{sentence}: 'pip install torch=={install}'"


def test_between_two_supported_minors_both_are_named():
    assert nearest_supported("2.8.0", ["2.5.1", "2.7.1", "2.9.1"]) == (
        "the nearest supported releases are 2.7.1 and 2.9.1", "2.9.1")


def stored_once(root, names):
    """2.5.1's series naming ``names`` in a 2.5.0 folder that keeps them (as a port would leave it)."""
    (root / "2.5.0").mkdir()
    original = (root / "2.5.1" / "series").read_text()
    for name in names:
        shutil.move(root / "2.5.1" / name, root / "2.5.0" / name)
    (root / "2.5.0" / "series").write_text("".join(f"{n}\n" for n in names))
    (root / "2.5.1" / "series").write_text("".join(
        f"../2.5.0/{line}\n" if line in names else f"{line}\n" for line in original.splitlines()))


def test_a_patch_stored_in_another_releases_folder_is_loaded_from_there(tmp_path):
    root = patches_copy(tmp_path / "patches")
    before = load_series("2.5.1", root)
    names, label = [p.name for p in before.patches[::2]], before.label
    stored_once(root, names)
    after = load_series("2.5.1", root)
    assert [p.name for p in after.patches] == [p.name for p in before.patches]
    assert [p.path.parent.name for p in after.patches if p.name in names] == ["2.5.0"] * len(names)
    # The label names what is applied, not where it is stored.
    assert after.label == label
    assert series_using(root, root / "2.5.0" / names[0]) == ["2.5.0", "2.5.1"]


@pytest.mark.parametrize("line, match", [
    ("../../2.5.1/163673-annotate.patch", "neither a patch file in"),
    ("sub/163673-annotate.patch", "neither a patch file in"),
    ("../2.5.1/no-such.patch", "lists ../2.5.1/no-such.patch, which does not exist"),
    ("163673-annotate.patch", "lists 163673-annotate.patch twice"),
])
def test_a_series_line_names_a_patch_in_its_folder_or_another_releases(tmp_path, line, match):
    root = patches_copy(tmp_path / "patches")
    with open(root / "2.5.1" / "series", "a") as f:
        f.write(line + "\n")
    with pytest.raises(OverlayError, match=match):
        load_series("2.5.1", root)


@pytest.mark.parametrize("release", supported_versions(default_patches_root()))
def test_every_behaviour_is_native_or_carried_on_every_release(release):
    found = behaviours(load_series(release))
    assert found.missing == [], f"torch {release} neither has nor gets {found.missing}"
    for name, since in found.native:
        assert release_key(since) <= release_key(release), name


def test_a_release_keeps_only_what_it_lacks(root):
    reference = load_series("2.5.1", root)
    lacking = [p for p in reference.patches
               if not native_release(p) or release_key(native_release(p)) > (2, 10, 0)]
    (root / "2.10.0" / "series").write_text("".join(f"../2.5.1/{p.name}\n" for p in lacking[1:]))
    found = behaviours(load_series("2.10.0", root))
    assert found.added == [p.name for p in lacking[1:]]
    assert found.missing == [lacking[0].name]
    assert sorted(name for name, _ in found.native) == sorted(p.name for p in reference.patches if p not in lacking)
    assert {since for _, since in found.native} == {"2.6.0", "2.8.0", "2.9.0", "2.10.0"}
