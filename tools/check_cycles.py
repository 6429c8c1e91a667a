"""No import cycle between the modules of a package: ``python tools/check_cycles.py [PACKAGE]``.

Every import statement counts, the deferred ones inside functions and those under
``if TYPE_CHECKING:`` too (grimp reads them all): a cycle that only a function-level import
closes still ties the two modules together, and import-linter's layers do not see it inside
one layer. Prints each cycle as a chain of modules (with the line of each import) and exits 1
if there is any; ``make lint`` runs it on ``exactlyonce``.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator

import grimp

Graph = dict[str, set[str]]


def import_graph(package: str) -> tuple[grimp.ImportGraph, Graph]:
    """grimp's graph of ``package`` (no cache on disk) and its modules' direct imports."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    return graph, edges


def strongly_connected(edges: Graph) -> Iterator[list[str]]:
    """Tarjan's strongly connected components (iterative), each of more than one module or a
    module importing itself: each is at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    yield sorted(component)


def cycle_through(start: str, component: list[str], edges: Graph) -> list[str]:
    """A shortest chain ``start -> ... -> start`` inside ``component``."""
    members = set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & members):
            if child == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                return [*reversed(chain), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle of {component}")


def describe(graph: grimp.ImportGraph, chain: list[str]) -> str:
    """``a (line 12) -> b (line 40) -> a``: each module with the line of its import of the next."""
    parts = []
    for importer, imported in zip(chain, chain[1:], strict=False):
        lines = sorted(
            d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)
        )
        where = f" (line {', '.join(map(str, lines))})" if lines else ""
        parts.append(f"{importer}{where}")
    return " -> ".join([*parts, chain[-1]])


def main(argv: list[str]) -> int:
    package = argv[0] if argv else "exactlyonce"
    graph, edges = import_graph(package)
    cycles = list(strongly_connected(edges))
    for component in cycles:
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        print(f"  {describe(graph, cycle_through(component[0], component, edges))}")
    print(f"{package}: {len(edges)} modules, {len(cycles)} import cycle(s)")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
