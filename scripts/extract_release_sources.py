"""Extract a torch release's Python sources, verified against its wheel's RECORD.

usage: extract_release_sources.py VERSION DEST
The wheel is taken from build/wheels (downloaded there with pip when absent).
CI compares the repository against these pristine sources to prove that no
PyTorch code was copied in: the .venv's torch cannot serve, it carries our patches.
"""
import sys
import zipfile
from pathlib import Path

from torch_overlay.pristine import fetch_wheel, from_wheel

REPO = Path(__file__).resolve().parent.parent


def main(version: str, dest: str) -> None:
    wheel = fetch_wheel(version, REPO / "build" / "wheels")
    read = from_wheel(wheel)
    names = [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("torch/") and n.endswith(".py")]
    for name in names:
        out = Path(dest) / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(read(name))
    print(f"extracted {len(names)} sources of torch {version} into {dest}")


if __name__ == "__main__":
    main(*sys.argv[1:])
