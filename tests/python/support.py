"""Shared helpers of the Python suite: where the test data is, and reading the golden files."""
from __future__ import annotations

import os
import signal
import subprocess
import unittest
import sys
from typing import Dict, List, Optional

# A process started with SIGINT ignored (a background job of a non-interactive shell, nohup)
# keeps it ignored, and Python then installs no KeyboardInterrupt handler: the Ctrl-C tests
# (test_errors, test_generate) would send their SIGINT into nothing. Python's own handler, as
# in a terminal, so that the suite does not depend on how it was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SHARED = os.environ.get("LLMM_SHARED", "../shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE_ROOT = os.path.join(REPO, "bindings", "python")


def shared(*parts: str) -> str:
    return os.path.join(SHARED, *parts)


def golden_ids(name: str) -> Dict[str, List[int]]:
    """The `prompt:` and `generated:` lines of golden/stories260K/NAME.ids."""
    out: Dict[str, List[int]] = {}
    with open(shared("golden", "stories260K", name + ".ids")) as f:
        for line in f:
            key, _, ids = line.partition(":")
            out[key.strip()] = [int(x) for x in ids.split()]
    return out


def golden_logits(name: str) -> List[float]:
    with open(shared("golden", "stories260K", name + ".logits")) as f:
        return [float(x) for x in f.read().split()]


def run_python(code: str, env_changes: Dict[str, Optional[str]]) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (the library is loaded once per process) with the
    environment changed as given (None removes a variable)."""
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def c_compiler() -> Optional[str]:
    """The C compiler of the build (LLMM_CC), or cc when present."""
    import shutil
    cc = os.environ.get("LLMM_CC") or "cc"
    return cc if shutil.which(cc) else None


class ModelTestCase(unittest.TestCase):
    """Tests sharing one stories260K model, loaded once for the class."""

    model: "object"

    @classmethod
    def setUpClass(cls) -> None:
        import llmmini
        cls.model = llmmini.Model(MODEL)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.model.close()
