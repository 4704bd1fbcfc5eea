"""The package's modules import each other without a cycle (counting imports made only for type
checking): context.py uses generate.py, and generate.py reaches a context only through the
GenerationHost it is handed."""
from __future__ import annotations

import ast
import os
import unittest
from typing import Dict, List, Set

from support import PACKAGE_ROOT

PACKAGE = os.path.join(PACKAGE_ROOT, "llmmini")


def imports_within_package() -> Dict[str, Set[str]]:
    """Module name -> the package's modules it imports (relative or as llmmini.X)."""
    modules = {f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py")}
    graph: Dict[str, Set[str]] = {}
    for name in modules:
        with open(os.path.join(PACKAGE, name + ".py")) as f:
            tree = ast.parse(f.read())
        found: Set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or node.module == "llmmini"
                                                     or (node.module or "").startswith("llmmini.")):
                base = (node.module or "").replace("llmmini", "", 1).lstrip(".")
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import x
                    found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("llmmini."))
        graph[name] = found - {name}
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle as a list of module names, or [] when there is none."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(m: str) -> List[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                cycle = visit(n)
                if cycle:
                    return cycle
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return []


class ImportCycleTest(unittest.TestCase):
    def test_no_module_imports_itself_back(self) -> None:
        graph = imports_within_package()
        self.assertIn("generate", graph["context"])
        self.assertNotIn("context", graph["generate"])
        self.assertEqual(find_cycle(graph), [], "import cycle")

    def test_the_check_sees_a_cycle(self) -> None:
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])


if __name__ == "__main__":
    unittest.main()
