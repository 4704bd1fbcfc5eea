"""`pip install --no-build-isolation bindings/python` works offline (the build backend is the
Debian-packaged setuptools) and installs an importable, typed package."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from support import PACKAGE_ROOT, run_python


def offline_backend() -> bool:
    """pip, setuptools 61 or later (pyproject metadata) and wheel are installed."""
    if not all(importlib.util.find_spec(m) for m in ("pip", "setuptools", "wheel")):
        return False
    from importlib.metadata import version  # not an import of setuptools, which patches distutils
    return int(version("setuptools").split(".")[0]) >= 61


@unittest.skipUnless(offline_backend(), "needs pip, setuptools >= 61 and wheel (Debian: python3-pip, "
                     "python3-setuptools, python3-wheel)")
class PipInstallTest(unittest.TestCase):
    def test_offline_install(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")  # a copy: the build leaves files in its source folder
            shutil.copytree(PACKAGE_ROOT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            target = os.path.join(tmp, "site")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                                "--no-deps", "--no-cache-dir", "--quiet", "--target", target, src],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(os.path.exists(os.path.join(target, "llmmini", "py.typed")))
            r = run_python("import llmmini; print(llmmini.__file__); print(llmmini.library_version())",
                           {"PYTHONPATH": target})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(os.path.join(target, "llmmini")))


if __name__ == "__main__":
    unittest.main()
