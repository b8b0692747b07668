"""The one exception type the CLI turns into a message for the user, and warnings."""
import sys


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
