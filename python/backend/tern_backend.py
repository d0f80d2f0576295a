"""The PEP 517 build backend of the tern package (pyproject.toml names it).

Why not setuptools.build_meta: with setuptools older than 70.1 its
build_wheel needs the separate `wheel` package (the `bdist_wheel`
command), which a pyenv or python.org CPython does not have and an offline
machine cannot fetch.  This backend needs setuptools only: it runs
`setup.py egg_info build` (setup.py finds and bundles libtern) into a fresh
temporary directory and zips the result into a wheel itself.  A fresh
directory on every build also means a reinstall never ships what an
earlier build left behind (python/build/ is not used).
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tag():
    """cpXY-cpXY<abiflags>-<platform>: the wheel is for this interpreter only."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, "py")
    ver = f"{sys.version_info[0]}{sys.version_info[1]}"
    abi = f"{impl}{ver}{getattr(sys, 'abiflags', '')}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}{ver}", abi, plat


def _run_setup(tmp):
    """egg_info (the metadata) and build (package + extension + bundled libs)."""
    egg, lib = os.path.join(tmp, "egg"), os.path.join(tmp, "lib")
    os.makedirs(egg)
    cmd = [sys.executable, "setup.py", "egg_info", "--egg-base", egg,
           "build", "--build-base", os.path.join(tmp, "build"), "--build-lib", lib]
    # setup.py's own messages (which libtern) go to the log pip shows with -v.
    subprocess.check_call(cmd, cwd=HERE, stdout=sys.stderr)
    infos = [d for d in os.listdir(egg) if d.endswith(".egg-info")]
    if len(infos) != 1:
        raise RuntimeError(f"tern backend: expected one .egg-info in {egg}, found {infos}")
    return os.path.join(egg, infos[0]), lib


def _metadata(egg_info):
    """name, version and the METADATA text (PKG-INFO is that format)."""
    with open(os.path.join(egg_info, "PKG-INFO"), encoding="utf-8") as f:
        text = f.read()
    fields = dict(line.split(": ", 1) for line in text.splitlines()
                  if ": " in line and not line.startswith(" "))
    return fields["Name"], fields["Version"], text


def _digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + h.decode("ascii")


def _zip_wheel(path, lib, dist_info, metadata, wheel_text):
    records = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(lib):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                arc = os.path.relpath(full, lib).replace(os.sep, "/")
                with open(full, "rb") as f:
                    data = f.read()
                zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
                zi.external_attr = (os.stat(full).st_mode & 0o777 | 0o100000) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(zi, data)
                records.append(f"{arc},{_digest(data)},{len(data)}")
        for name, text in (("METADATA", metadata), ("WHEEL", wheel_text)):
            data = text.encode("utf-8")
            z.writestr(f"{dist_info}/{name}", data)
            records.append(f"{dist_info}/{name},{_digest(data)},{len(data)}")
        records.append(f"{dist_info}/RECORD,,")
        z.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    py, abi, plat = _tag()
    tmp = tempfile.mkdtemp(prefix="tern-wheel-")
    try:
        egg_info, lib = _run_setup(tmp)
        name, version, metadata = _metadata(egg_info)
        dist = f"{name.replace('-', '_')}-{version}"
        wheel_text = (f"Wheel-Version: 1.0\nGenerator: tern_backend\n"
                      f"Root-Is-Purelib: false\nTag: {py}-{abi}-{plat}\n")
        whl = f"{dist}-{py}-{abi}-{plat}.whl"
        _zip_wheel(os.path.join(wheel_directory, whl), lib, f"{dist}.dist-info", metadata,
                   wheel_text)
        return whl
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
