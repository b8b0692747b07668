"""torch-overlay: backports of upstream FX annotation tracing onto released torch."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithPatches(build_py):
    """Ship patches/ inside the package as torch_overlay/_patches, so an
    installed (non-editable) torch-overlay still finds its series."""

    def run(self):
        super().run()
        if not self.dry_run:
            dest = Path(self.build_lib) / "torch_overlay" / "_patches"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(Path(__file__).parent / "patches", dest)


setup(
    name="torch-overlay",
    version="0.1.0",
    description=__doc__,
    packages=["torch_overlay", "torch_overlay.report"],
    python_requires=">=3.9",
    entry_points={"console_scripts": ["torch-overlay=torch_overlay.cli:main"]},
    cmdclass={"build_py": BuildPyWithPatches},
)
