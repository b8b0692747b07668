"""The torch-overlay command line."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .errors import OverlayError


def _cmd_status(args) -> tuple[str, int]:
    import json

    from .inplace import status
    found = status()
    return (json.dumps(found.as_json(), indent=1) if args.json else found.render()), found.exit_code


def _cmd_apply(args) -> str:
    from .inplace import apply
    return apply(force=args.force)


def _cmd_revert(args) -> str:
    from .inplace import revert
    return revert(force=args.force)


def _cmd_rebuild_wheel(args) -> str:
    from .wheel import rebuild_wheel
    return str(rebuild_wheel(Path(args.wheel), Path(args.output), local_label=args.local_version))


def _cmd_apply_source(args) -> str:
    from .source_tree import apply_source
    return apply_source(Path(args.checkout), branch=args.branch, build=args.build)


def _cmd_develop(args) -> str:
    from .develop import develop
    return develop(Path(args.checkout), force=args.force)


def _cmd_workspace(args) -> str:
    from .workspace import create_workspace
    return create_workspace(args.version, Path(args.dir), wheel=args.wheel and Path(args.wheel), extra=args.add,
                            from_version=args.from_version, from_wheel_path=args.from_wheel and Path(args.from_wheel))


def _cmd_refresh(args) -> str:
    from .workspace import refresh
    return refresh(Path(args.dir))


def _cmd_demo(args) -> str:
    from .demo import main
    from .inplace import finish_interrupted
    recovered = finish_interrupted()  # before the demo imports torch
    return "\n".join(x for x in (recovered, main()) if x)


def _cmd_report(args) -> str:
    from .report.command import main
    return main(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torch-overlay", description="Backport upstream FX annotation tracing onto released torch.")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "status", help="torch version and location, the series for it, what is applied, modified files",
        description="Exit status: 0 when torch is consistent (pristine, or patched by the current series of its "
                    "release); 1 when it needs action (a problem, files differing from RECORD, an older series "
                    "applied; the output names the command to run); 2 for usage errors.")
    st.add_argument("--json", action="store_true", help="print the status as one JSON object, for scripts")
    st.set_defaults(fn=_cmd_status)
    a = sub.add_parser("apply", help="patch the torch of this Python in place")
    a.add_argument("--force", action="store_true", help="patch target files even if they differ from the wheel's "
                   "RECORD, and while other processes have this torch loaded (with a warning)")
    a.set_defaults(fn=_cmd_apply)
    rv = sub.add_parser("revert", help="restore the patched files byte for byte")
    rv.add_argument("--force", action="store_true", help="revert while other processes have this torch loaded "
                    "(with a warning)")
    rv.set_defaults(fn=_cmd_revert)
    w = sub.add_parser("rebuild-wheel", help="write a copy of a torch wheel with the series applied")
    w.add_argument("wheel")
    w.add_argument("-o", "--output", required=True, help="folder for the new wheel")
    w.add_argument("--local-version", help="PEP 440 local label (default: overlay.g<series digest>)")
    w.set_defaults(fn=_cmd_rebuild_wheel)
    s = sub.add_parser("apply-source", help="git am the series onto a PyTorch source checkout")
    s.add_argument("checkout")
    s.add_argument("--branch", help="new branch name (default: overlay/<version>)")
    s.add_argument("--build", action="store_true", help="then run the source build: python setup.py develop")
    s.set_defaults(fn=_cmd_apply_source)
    dv = sub.add_parser("develop", help="make this Python's torch run a checkout's Python files (links; no build)",
                        description="CHECKOUT holds the series as commits on the release this Python's torch is "
                                    "(what apply-source or workspace make). Every Python file under torch/ that "
                                    "those commits change becomes a link to the checkout's file; 'revert' puts "
                                    "the release's files back byte for byte.")
    dv.add_argument("checkout")
    dv.add_argument("--force", action="store_true", help="go on while other processes have this torch loaded "
                    "(with a warning)")
    dv.set_defaults(fn=_cmd_develop)
    ws = sub.add_parser("workspace", help="a git repo of pristine files with each patch as a commit")
    ws.add_argument("version")
    ws.add_argument("dir")
    ws.add_argument("--wheel", help="take pristine files from this wheel instead of the installed torch")
    ws.add_argument("--add", action="append", default=[], metavar="PATH",
                    help="also bring in this torch file (repository path, e.g. torch/fx/proxy.py)")
    ws.add_argument("--from", dest="from_version", metavar="RELEASE",
                    help="port RELEASE's series to VERSION: a three-way merge of each patch, stopping at a conflict")
    ws.add_argument("--from-wheel", help="with --from: take RELEASE's pristine files from this wheel")
    ws.set_defaults(fn=_cmd_workspace)
    r = sub.add_parser("refresh", help="regenerate patches/<version>/ from a workspace's commits")
    r.add_argument("dir")
    r.set_defaults(fn=_cmd_refresh)
    sub.add_parser("demo", help="print the forward/backward table of a small annotated model").set_defaults(fn=_cmd_demo)
    rp = sub.add_parser("report", help="run a script, capture every graph torch.compile makes, write an HTML report "
                                        "of its annotations")
    rp.add_argument("-o", "--output", default="report.html",
                    help="HTML file (under torchrun: one per rank, report.rank<N>.html); may follow the script's args")
    rp.add_argument("--fail-on-unannotated", action="store_true",
                    help="exit 1 and list the backward ops without an annotation; may follow the script's args")
    rp.add_argument("--profile", action="store_true",
                    help="run the script under torch.profiler with Inductor's kernel_annotations flag on: the page adds "
                         "per-region forward and backward time and kernel count, and the Chrome trace is written "
                         "beside it (report.trace.json); may follow the script's args")
    rp.add_argument("script")
    rp.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    rp.set_defaults(fn=_cmd_report)
    return p


def _exit_on_sigterm(signum, frame):
    """SIGTERM unwinds like ^C, so a command cleans up (or undoes a half-made change) before it exits."""
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        out = args.fn(args)
    except OverlayError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except OSError as e:  # not foreseen by the command: one line, not a traceback
        where = f" ({e.filename})" if e.filename else ""
        print(OverlayError(f"{e.strerror or e}{where}", todo="see 'torch-overlay status' for what the installation "
                           "holds now").render(), file=sys.stderr)
        return 2
    out, code = out if isinstance(out, tuple) else (out, 0)
    if out:
        print(out)
    return code
