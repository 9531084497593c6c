"""Build hook: compile simnet's hot modules with Cython, when possible.

``simnet/network.py`` and ``simnet/executor.py`` are plain Python; their
``.pxd`` files beside them give Cython the C types of their hot classes. The
compiled modules run the same code about three times faster (see
``bench/bench_simnet.py --against-pure``). Compiling is optional: without
Cython or a C compiler, or with ``COMMSIM_PURE_PYTHON=1`` at install time, the
install still succeeds and the pure-Python modules are used.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The simulator core, and the C helper that puts Python's object arenas on huge pages
# (simnet/arenas.py).
COMPILED = ["simnet/network.py", "simnet/executor.py", "simnet/_arenas.pyx"]


def _warn(what: str, exc: BaseException) -> None:
    print(
        f"commsim: {what} failed ({type(exc).__name__}: {exc}); the simulator runs as pure "
        "Python (correct, 2-10x slower). Install Cython and a C compiler, then reinstall.",
        file=sys.stderr,
    )


class OptionalBuildExt(build_ext):
    """A failed compile leaves the pure-Python modules in use; it never fails the install."""

    def run(self) -> None:
        self._failed: set[str] = set()
        try:
            super().run()
        except Exception as exc:
            _warn("compiling the simulator core", exc)

    def build_extension(self, ext) -> None:
        # An editable install builds in a fresh temporary directory every time; reuse the
        # module already beside the source when it is newer than its generated C (which
        # cythonize regenerates whenever the .py or .pxd changed), saving ~20 s a module.
        built = Path(self.get_ext_filename(ext.name))
        target = Path(self.get_ext_fullpath(ext.name))
        if (
            not self.force
            and built.is_file()
            and built.resolve() != target.resolve()
            and all(built.stat().st_mtime > Path(src).stat().st_mtime for src in ext.sources)
        ):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, target)
            return
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._failed.add(ext.name)
            _warn(f"compiling {ext.name}", exc)

    def copy_extensions_to_source(self) -> None:
        # An editable install copies each module beside its source: skip the ones that
        # failed, so they do not take the others down with them.
        every = self.extensions
        self.extensions = [e for e in every if e.name not in getattr(self, "_failed", ())]
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = every


def _remove_in_place_builds() -> None:
    """A pure-Python install must not leave an older compiled module in use."""
    for source in COMPILED:
        for old in Path(source).parent.glob(Path(source).stem + ".*.so"):
            old.unlink()
            print(f"commsim: removed {old} (COMMSIM_PURE_PYTHON is set)", file=sys.stderr)


def ext_modules() -> list:
    if os.environ.get("COMMSIM_PURE_PYTHON", "") not in ("", "0"):
        _remove_in_place_builds()
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        _warn("importing Cython", exc)
        return []
    try:
        return cythonize(
            COMPILED,
            build_dir="build/cython",  # the generated C stays out of the source tree
            compiler_directives={
                "language_level": 3,
                # Types come from the .pxd files only: compiled, an annotation such as
                # `-> dict` would otherwise reject a defaultdict and `int` truncate floats.
                "annotation_typing": False,
                "embedsignature": True,
            },
            quiet=True,
        )
    except Exception as exc:
        _warn("translating the simulator core to C", exc)
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
