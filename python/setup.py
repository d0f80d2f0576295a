"""Build the tern Python package: the extension tern._tern against libtern.

Where libtern comes from (python/README.md, "Which libtern"):

1. TERN_PREFIX=<prefix>: an installed tern (`make install PREFIX=...`).
   The extension links <prefix>/lib*/libtern.so with a run path to it;
   plugins are found next to that library, as for any program.
2. Otherwise the tern source tree this directory belongs to
   (TERN_SOURCE_DIR overrides it): its `build/` when `make` built
   libtern there (TERN_BUILD_DIR overrides it), else `build-pip/`,
   configured and built here with CMake (no tests, no Python module).
   libtern.so.0 and the transport plugins are copied into the package
   (tern/_libs/, found through a $ORIGIN run path), so the installed
   package does not depend on the build directory.
3. Outside a source tree: `pkg-config tern` (an installed tern that
   PKG_CONFIG_PATH finds), linked as in 1.

Nothing is downloaded: offline, run
`pip install --no-build-isolation ./python` in a venv made with
`python3 -m venv --system-site-packages`.  pip builds the wheel through
backend/tern_backend.py (pyproject.toml), which runs this file's `build`
in a fresh directory and needs no `wheel` package.
"""

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SOURCES = ["src/module.c", "src/engine.c", "src/engine_memory.c", "src/engine_peers.c",
           "src/engine_base.c", "src/registration.c", "src/segment.c", "src/batch.c",
           "src/logbridge.c", "src/errors.c", "src/args.c", "src/results.c"]


def fail(msg):
    sys.exit("tern setup: " + msg)


def prefix_libdir(prefix):
    for cand in sorted(glob.glob(os.path.join(prefix, "lib*", "**", "libtern.so"),
                             recursive=True)):
        return os.path.dirname(cand)
    fail(f"no libtern.so under {prefix}/lib*: is TERN_PREFIX the prefix of `make install`?")


def source_tree():
    src = os.environ.get("TERN_SOURCE_DIR") or str(HERE.parent)
    return src if os.path.isfile(os.path.join(src, "include", "tern", "tern.h")) else None


def cmake_build(src, build):
    """Configure (once) and build libtern and its plugins in `build`."""
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        cmd = ["cmake", "-S", src, "-B", build, "-DTERN_BUILD_TESTS=OFF",
               "-DTERN_PYTHON=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
        print("tern setup:", " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
    jobs = str(os.cpu_count() or 2)
    cmd = ["cmake", "--build", build, "-j", jobs]
    print("tern setup:", " ".join(cmd), flush=True)
    subprocess.check_call(cmd)


def in_tree(src):
    """(include dir, lib dir, bundle) for a libtern built in the tree."""
    build = os.environ.get("TERN_BUILD_DIR")
    if not build:
        build = os.path.join(src, "build")
        if not os.path.isfile(os.path.join(build, "lib", "libtern.so")):
            build = os.path.join(src, "build-pip")
    build = os.path.abspath(build)
    if not os.path.isfile(os.path.join(build, "lib", "libtern.so")):
        if shutil.which("cmake") is None:
            fail("cmake not found: it builds libtern from the source tree "
                 "(or set TERN_PREFIX to an installed tern)")
        cmake_build(src, build)
    return os.path.join(src, "include"), os.path.join(build, "lib"), True


def pkg_config():
    try:
        out = subprocess.run(["pkg-config", "--variable=prefix", "tern"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def locate():
    prefix = os.environ.get("TERN_PREFIX")
    if prefix:
        return os.path.join(prefix, "include"), prefix_libdir(prefix), False
    src = source_tree()
    if src:
        return in_tree(src)
    prefix = pkg_config()
    if prefix:
        return os.path.join(prefix, "include"), prefix_libdir(prefix), False
    fail("libtern not found: set TERN_PREFIX to an installed tern (make install "
         "PREFIX=...), put its lib/pkgconfig on PKG_CONFIG_PATH, or build from the "
         "tern source tree (TERN_SOURCE_DIR)")


class BuildExt(build_ext):
    """Find libtern when building, not when setup.py is merely read."""

    def run(self):
        inc, libdir, bundle = locate()
        print(f"tern setup: headers {inc}, libtern {libdir}"
              f"{' (bundled into the package)' if bundle else ''}", flush=True)
        for ext in self.extensions:
            ext.include_dirs.append(inc)
            ext.library_dirs.append(libdir)
            if bundle:
                ext.runtime_library_dirs.append("$ORIGIN/_libs")
            else:
                ext.runtime_library_dirs.append(libdir)
        # What an earlier build left in build_lib/tern/_libs (or a copy of an
        # in-place build's) must not ship with a package linked elsewhere.
        shutil.rmtree(os.path.join(self.build_lib, "tern", "_libs"), ignore_errors=True)
        super().run()
        if bundle:
            self.bundle(libdir)

    def bundle(self, libdir):
        """libtern.so.0 and the plugins (found in <dir of libtern>/tern)."""
        dest = os.path.join(self.build_lib, "tern", "_libs")
        os.makedirs(os.path.join(dest, "tern"), exist_ok=True)
        shutil.copy2(os.path.realpath(os.path.join(libdir, "libtern.so.0")),
                     os.path.join(dest, "libtern.so.0"))
        for p in glob.glob(os.path.join(libdir, "tern", "libtern-*.so")):
            shutil.copy2(p, os.path.join(dest, "tern", os.path.basename(p)))
        if self.inplace:
            shutil.copytree(dest, HERE / "tern" / "_libs", dirs_exist_ok=True)


setup(
    ext_modules=[Extension("tern._tern", sources=SOURCES, libraries=["tern"],
                           extra_compile_args=["-std=c11", "-Wall", "-Wextra"])],
    cmdclass={"build_ext": BuildExt},
)
