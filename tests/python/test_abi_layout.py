"""The ctypes mirrors in llmmini/_structs.py have the C compiler's field offsets and sizes.

A size-prefixed struct may have grown in the header (fields appended, as the ABI allows): the
mirror is then a correct prefix, which the library accepts, so only its fields are compared and
the C size may be larger. Other structs must match exactly."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import unittest

from llmmini import _structs as S
from support import REPO, c_compiler


@unittest.skipUnless(c_compiler(), "needs a C compiler")
class StructLayoutTest(unittest.TestCase):
    def test_every_struct_matches_the_header(self) -> None:
        lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"llmmini.h\"", "int main(void) {"]
        expected = []
        for c_name, mirror in S.STRUCTS.items():
            lines.append(f'    printf("%zu\\n", sizeof({c_name}));')
            expected.append((c_name, "sizeof", ctypes.sizeof(mirror)))
            for field, _ in mirror._fields_:
                lines.append(f'    printf("%zu\\n", offsetof({c_name}, {field}));')
                expected.append((c_name, field, getattr(mirror, field).offset))
        lines += ["    return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            subprocess.run([c_compiler(), "-I", os.path.join(REPO, "include"), "-o", exe, src], check=True)
            got = [int(x) for x in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()]
        self.assertEqual(len(got), len(expected))
        for (c_name, what, want), have in zip(expected, got):
            grown = what == "sizeof" and S.STRUCTS[c_name]._fields_[0][0] == "size" and have > want
            if not grown:
                self.assertEqual(have, want, f"{c_name} {what}")


if __name__ == "__main__":
    unittest.main()
