"""The ``Stack:`` header of a patch: the patches its pull request sits on.

A patch written as an upstream pull request either applies alone to the pristine release, or names, in its
DEP-3 header, exactly the patches of its series it needs below it, in the order the series applies them:

    Stack: local-annotation-entered-in-trace, local-annotate-fresh-dict

That is what a reviewer checks out before the pull request (ghstack's "stack" of PRs), and what
scripts/pr_stack_check.py applies below it to test it. A stack is closed: it names every patch below it, the
ones its own patches sit on included, so a pull request's stack is read off its own header alone.
"""
from __future__ import annotations

from .errors import OverlayError
from .series import Patch, Series

STACK_FIELD = "Stack"


def patch_name(patch: Patch) -> str:
    return patch.fields["Patch-Name"]


def declared_stack(patch: Patch) -> list[str]:
    """The names in ``patch``'s ``Stack:`` line, as written (empty without one)."""
    value = patch.fields.get(STACK_FIELD)
    if value is None:
        return []
    names = [n.strip() for n in value.split(",")]
    if not value.strip() or any(not n for n in names):
        raise OverlayError(f"{patch.path}: its Stack line {value!r} has an empty name",
                           unchanged="nothing was changed",
                           todo="write 'Stack: name-a, name-b' (Patch-Names separated by commas), or drop the line")
    return names


def stack_of(series: Series, patch: Patch) -> list[Patch]:
    """The patches ``patch`` sits on, from its ``Stack:`` line, checked against ``series``.

    Refused with the problem named: a name the series does not have, the patch itself, a name twice, a patch
    the series applies after this one, names out of the series' order, and a stack that leaves out a patch
    one of its own patches sits on."""
    where = f"{patch.path.name} (torch {series.version} series)"
    position = {patch_name(p): i for i, p in enumerate(series.patches)}
    by_name = {patch_name(p): p for p in series.patches}
    me = patch_name(patch)
    names = declared_stack(patch)
    todo = "fix its Stack line: the Patch-Names it sits on, in the order of the series"
    for name in names:
        if name == me:
            raise OverlayError(f"{where}: its Stack names the patch itself ({me}); a stack names the patches below "
                               "it", unchanged="nothing was changed", todo=todo)
        if name not in by_name:
            raise OverlayError(f"{where}: its Stack names {name}, which is not a patch of the series",
                               unchanged="nothing was changed", todo=todo)
        if names.count(name) > 1:
            raise OverlayError(f"{where}: its Stack names {name} twice", unchanged="nothing was changed", todo=todo)
        if position[name] > position[me]:
            raise OverlayError(f"{where}: its Stack names {name}, which the series applies after {me}; a patch "
                               "sits only on patches applied before it", unchanged="nothing was changed",
                               todo=todo)
    in_order = sorted(names, key=position.__getitem__)
    if names != in_order:
        raise OverlayError(f"{where}: its Stack lists {', '.join(names)}, not in the order the series applies "
                           f"them ({', '.join(in_order)})", unchanged="nothing was changed", todo=todo)
    for name in names:
        missing = [n for n in declared_stack(by_name[name]) if n not in names]
        if missing:
            raise OverlayError(f"{where}: its Stack names {name}, which sits on {', '.join(missing)}, left out; a "
                               "stack names every patch below it", unchanged="nothing was changed", todo=todo)
    return [by_name[n] for n in names]


def stacks(series: Series) -> dict[str, list[Patch]]:
    """Patch name -> the patches it sits on, for every patch of ``series`` (each ``Stack:`` line checked)."""
    return {patch_name(p): stack_of(series, p) for p in series.patches}


def stacked_on(series: Series, patch: Patch) -> list[Patch]:
    """The patches of ``series`` whose ``Stack:`` line names ``patch``, in series order."""
    return [p for p in series.patches if patch in stack_of(series, p)]


GHSTACK_HEADER = "Stack from [ghstack](https://github.com/ezyang/ghstack) (oldest at bottom):"
STACKED_ON_THIS = "Pull requests stacked on this one:"


def ghstack_block(series: Series, patch: Patch) -> str:
    """The stack a pull request's body opens with, as ghstack writes it: one stack, the patches its own
    ``Stack:`` line names with the patch itself on top (newest first, this one marked ``__->__``); then, for a
    patch that others sit on, one line naming them. '' for a patch that is part of no stack.

    One block, read off the patch's own header: a reviewer checks out exactly that stack, and a patch that
    sits on nothing lists nothing below it. The patches above it are named rather than listed as its stack,
    since several may sit on it side by side (ghstack's list is one line of descent)."""
    below = stack_of(series, patch)
    above = stacked_on(series, patch)
    if not below and not above:
        return ""
    lines = [GHSTACK_HEADER, f"* __->__ {patch_name(patch)}", *(f"* {patch_name(p)}" for p in reversed(below))]
    block = "\n".join(lines)
    if above:
        block += f"\n\n{STACKED_ON_THIS} {', '.join(patch_name(p) for p in above)}."
    return block
