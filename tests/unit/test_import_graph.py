"""The package's import graph has no cycle between modules (issue 25): lint-imports holds the
layers between packages and inside the engine; this holds every module, lazy imports included."""

import pytest

grimp = pytest.importorskip("grimp", reason="grimp (import-linter's graph; a dev dependency) is not installed: "
                            "pip install -e '.[dev]'")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_planted_cycle_and_passes_a_chain():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_of_the_package_is_in_an_import_cycle():
    g = grimp.build_graph("fuzzrunner")
    graph = {m: {x for x in g.find_modules_directly_imported_by(m) if x.startswith("fuzzrunner")}
             for m in g.modules if m.startswith("fuzzrunner")}
    assert len(graph) > 100  # the whole package was read
    assert _cycles(graph) == []
