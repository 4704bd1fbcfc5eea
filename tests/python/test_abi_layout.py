"""The ctypes mirrors in llmmini/_structs.py have the C compiler's field offsets and sizes, and
the status codes in llmmini/errors.py the header's values.

A size-prefixed struct may have grown in the header (fields appended, as the ABI allows): the
mirror is then a correct prefix, which the library accepts, so only its fields are compared and
the C size may be larger. Other structs must match exactly."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import unittest
from typing import List

from llmmini import _structs as S
from llmmini import errors
from support import REPO, c_compiler


def c_output(body: List[str]) -> List[int]:
    """The integers printed by a C main() of the body's lines, compiled against llmmini.h."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"llmmini.h\"", "int main(void) {"]
    lines += body + ["    return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run([c_compiler(), "-I", os.path.join(REPO, "include"), "-o", exe, src], check=True)
        return [int(x) for x in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()]


@unittest.skipUnless(c_compiler(), "needs a C compiler")
class StructLayoutTest(unittest.TestCase):
    def test_every_struct_matches_the_header(self) -> None:
        lines: List[str] = []
        expected = []
        for c_name, mirror in S.STRUCTS.items():
            lines.append(f'    printf("%zu\\n", sizeof({c_name}));')
            expected.append((c_name, "sizeof", ctypes.sizeof(mirror)))
            for field, _ in mirror._fields_:
                lines.append(f'    printf("%zu\\n", offsetof({c_name}, {field}));')
                expected.append((c_name, field, getattr(mirror, field).offset))
        got = c_output(lines)
        self.assertEqual(len(got), len(expected))
        for (c_name, what, want), have in zip(expected, got):
            grown = what == "sizeof" and S.STRUCTS[c_name]._fields_[0][0] == "size" and have > want
            if not grown:
                self.assertEqual(have, want, f"{c_name} {what}")

    def test_status_codes_match_the_header(self) -> None:
        names = [n for n in vars(errors) if n.startswith("LLMM_")]
        self.assertIn("LLMM_ERR_BUFFER_TOO_SMALL", names)
        got = c_output([f'    printf("%d\\n", (int){n});' for n in names])
        self.assertEqual(dict(zip(names, got)), {n: getattr(errors, n) for n in names})


if __name__ == "__main__":
    unittest.main()
