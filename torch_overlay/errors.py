"""The one exception type the CLI turns into a message for the user, warnings, and the check of a place
the command will write to."""
import os
import sys
from pathlib import Path


class OverlayError(Exception):
    """A problem the user can act on.

    ``what`` says what happened, ``unchanged`` what was left as it was, and
    ``todo`` what to do next; the CLI prints all three and exits with status 2.
    """

    def __init__(self, what: str, *, unchanged: str = "", todo: str = ""):
        super().__init__(what)
        self.what = what
        self.unchanged = unchanged
        self.todo = todo

    def render(self) -> str:
        lines = [f"error: {self.what}"]
        if self.unchanged:
            lines.append(f"unchanged: {self.unchanged}")
        if self.todo:
            lines.append(f"to do: {self.todo}")
        return "\n".join(lines)


def warn(message: str) -> None:
    """Something the user should know about a command that succeeded (on stderr)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def check_output_location(path: Path, what: str, unchanged: str) -> None:
    """Refuse, before any work starts, an output ``path`` that cannot be created: its nearest existing
    parent is not a folder, or cannot be written to."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    problem = (f"{parent} is not a folder" if not parent.is_dir()
               else f"{parent} is not writable" if not os.access(parent, os.W_OK | os.X_OK) else None)
    if problem:
        raise OverlayError(f"cannot write {what} {path}: {problem}", unchanged=unchanged,
                           todo="choose a path in a folder you can write to")
