"""Finding the library: LLMMINI_LIB, next to the package, the system loader; and refusing a
library of another ABI version with a message."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest

from support import PACKAGE_ROOT, c_compiler, run_python

LIB = os.environ.get("LLMMINI_LIB", "")
PRINT_PATH = "import llmmini; print(llmmini.library_path()); print(llmmini.library_version())"


@unittest.skipUnless(LIB and os.path.exists(LIB), "LLMMINI_LIB must name the built library")
class LibraryLookupTest(unittest.TestCase):
    def test_llmmini_lib_is_used(self) -> None:
        r = run_python(PRINT_PATH, {"LLMMINI_LIB": LIB})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split("\n")[0], LIB)

    def test_a_missing_llmmini_lib_is_an_error(self) -> None:
        r = run_python("import llmmini\ntry:\n    llmmini.Model('x.gguf')\nexcept llmmini.LibraryError as e:\n"
                       "    print(type(e).__name__, e.message)", {"LLMMINI_LIB": "/nonexistent/libllmmini.so.0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LibraryError cannot load /nonexistent/libllmmini.so.0", r.stdout)

    def test_next_to_the_package_then_the_system_loader(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(os.path.join(PACKAGE_ROOT, "llmmini"), os.path.join(tmp, "llmmini"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            env = {"LLMMINI_LIB": None, "PYTHONPATH": tmp, "LD_LIBRARY_PATH": os.path.dirname(LIB)}
            # no copy beside it: the system loader finds it on LD_LIBRARY_PATH
            r = run_python(PRINT_PATH, env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split("\n")[0], "libllmmini.so.0")
            bundled = os.path.join(tmp, "llmmini", "libllmmini.so.0")
            shutil.copy(LIB, bundled)
            r = run_python(PRINT_PATH, env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split("\n")[0], bundled)
            # LLMMINI_LIB wins over both
            r = run_python(PRINT_PATH, dict(env, LLMMINI_LIB=LIB))
            self.assertEqual(r.stdout.split("\n")[0], LIB)
            # nothing anywhere: a LibraryError that says what to do
            os.remove(bundled)
            r = run_python("import llmmini\ntry:\n    llmmini.library_version()\nexcept llmmini.LibraryError as e:\n"
                           "    print(e.message)", dict(env, LD_LIBRARY_PATH="/nonexistent"))
            if "not found" in r.stdout:  # unless one is installed system-wide
                self.assertIn("set LLMMINI_LIB", r.stdout)

    @unittest.skipUnless(c_compiler(), "needs a C compiler to build a library of another ABI version")
    def test_another_abi_version_is_refused(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "fake.c")
            with open(src, "w") as f:
                f.write("unsigned llmm_abi_version(void) { return 999; }\n")
            fake = os.path.join(tmp, "libllmmini.so.0")
            subprocess.run([c_compiler(), "-shared", "-fPIC", "-o", fake, src], check=True)
            r = run_python("import llmmini\ntry:\n    llmmini.Model('x.gguf')\nexcept llmmini.LibraryError as e:\n"
                           "    print(e.message)", {"LLMMINI_LIB": fake})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("has ABI version 999", r.stdout)
            self.assertIn("written for ABI version 1", r.stdout)


if __name__ == "__main__":
    unittest.main()
