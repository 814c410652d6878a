"""Junction trees over the cliques of measured marginals.

A model over a public domain (column names and their cardinalities) is built from the
sets of columns that were measured. Their interaction graph is triangulated by greedy
elimination (at each step the variable whose elimination creates the smallest table,
ties broken by fewest fill-in edges), the maximal elimination cliques become the
nodes, and a maximum-weight spanning tree over shared-variable counts joins them: the
running-intersection property then holds. Columns measured nowhere get a clique of
their own. Every clique keeps its columns in domain order, so a subset of a clique is
an ordered subsequence of it (broadcasting needs no transposition).

Nothing here ever builds a table over the full domain; :func:`build_junction_tree`
refuses a tree whose largest clique table exceeds ``max_cells``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

__all__ = ["Domain", "JunctionTree", "ModelTooLarge", "UnionFind", "build_junction_tree", "interaction_graph",
           "triangulate"]

Clique = tuple[str, ...]


class ModelTooLarge(ValueError):
    """The junction tree's largest clique table is above the stated cell limit."""


@dataclass(frozen=True, kw_only=True)
class Domain:
    """Ordered column names with their (public) cardinalities."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.names) != len(self.sizes):
            raise ValueError(f"{len(self.names)} names for {len(self.sizes)} sizes")
        if len(set(self.names)) != len(self.names):
            raise ValueError("domain column names must be distinct")
        bad = [n for n, s in zip(self.names, self.sizes) if int(s) < 1]
        if bad:
            raise ValueError(f"columns {bad} need a cardinality >= 1")

    @classmethod
    def from_dict(cls, sizes: dict[str, int]) -> "Domain":
        """The domain of a ``{column: cardinality}`` mapping, columns in the mapping's order."""
        return cls(names=tuple(sizes), sizes=tuple(int(v) for v in sizes.values()))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    def index(self, name: str) -> int:
        """Position of column ``name`` in the domain; KeyError if it is not there."""
        try:
            return self._positions[name]
        except KeyError:
            raise KeyError(f"column {name!r} is not in the domain") from None

    def size(self, name: str) -> int:
        """Cardinality (number of codes) of column ``name``."""
        return self.sizes[self.index(name)]

    def canonical(self, attrs: Iterable[str]) -> Clique:
        """The distinct columns of ``attrs`` in domain order (raises for an unknown name)."""
        return tuple(sorted(set(attrs), key=self.index))

    def shape(self, attrs: Sequence[str]) -> tuple[int, ...]:
        """Cardinalities of ``attrs`` in the order given: the shape of their table."""
        return tuple(self.size(a) for a in attrs)

    def cells(self, attrs: Iterable[str]) -> int:
        """Number of cells of a table over ``attrs`` (product of cardinalities; 1 for none)."""
        return math.prod(self.size(a) for a in attrs)


def interaction_graph(domain: Domain, cliques: Iterable[Iterable[str]]) -> dict[str, set[str]]:
    """Each column's neighbours in the graph the cliques induce (every column of the domain
    is a key; a name outside the domain raises KeyError)."""
    adj: dict[str, set[str]] = {n: set() for n in domain.names}
    for c in cliques:
        c = set(c)
        for a in c:
            if a not in adj:
                domain.index(a)  # raises: not a column of the domain
            adj[a].update(c)
    for a, nb in adj.items():
        nb.discard(a)
    return adj


def triangulate(domain: Domain, cliques: Iterable[Iterable[str]],
                graph: dict[str, set[str]] | None = None) -> list[Clique]:
    """Maximal cliques of a greedy triangulation of the graph the cliques induce (plus
    ``graph``'s edges, an :func:`interaction_graph` the caller built once; it is not changed).

    Each step eliminates the variable with the least key (cells of its elimination clique,
    fill-in edges, domain position). A variable's cells change only when a neighbour is
    eliminated, so they are kept and updated; the fill-in count, the costly part, is counted
    only to break a tie on cells."""
    adj = interaction_graph(domain, cliques)
    if graph is not None:
        for a, nb in graph.items():
            adj[a] |= nb
    size = dict(zip(domain.names, domain.sizes))
    order = domain.index
    remaining = set(domain.names)
    cells = {v: size[v] * math.prod(size[a] for a in adj[v]) for v in remaining}
    found: list[Clique] = []
    eliminated: list[str] = []
    while remaining:
        low = min(cells[v] for v in remaining)
        ties = [v for v in remaining if cells[v] == low]
        if len(ties) == 1:
            best = ties[0]
        else:
            def tie_key(v: str) -> tuple[int, int]:
                nb = adj[v] & remaining
                return sum(1 for a in nb for b in nb if a < b and b not in adj[a]), order(v)
            best = min(ties, key=tie_key)
        nb = adj[best] & remaining
        for a in nb:
            adj[a] |= nb
            adj[a].discard(a)
        found.append(tuple(sorted(nb | {best}, key=order)))
        eliminated.append(best)
        remaining.remove(best)
        for a in nb:
            cells[a] = size[a] * math.prod(map(size.__getitem__, adj[a] & remaining))
    # A clique found later never holds a variable eliminated before it, so clique i can lie
    # inside only an earlier clique that holds its own eliminated variable.
    sets = [frozenset(c) for c in found]
    maximal = [c for i, (c, s) in enumerate(zip(found, sets))
               if not any(eliminated[i] in o and s < o for o in sets[:i])]
    return list(dict.fromkeys(maximal))


@dataclass(frozen=True, kw_only=True)
class JunctionTree:
    """Cliques (domain-ordered) and the tree edges joining them.

    ``order`` lists the cliques from the root outwards (breadth first); ``parent[i]``
    is the index of clique i's parent (-1 for the root of each component).
    """

    domain: Domain
    cliques: tuple[Clique, ...]
    edges: tuple[tuple[int, int], ...]
    order: tuple[int, ...]
    parent: tuple[int, ...]

    def separator(self, i: int, j: int) -> Clique:
        """Columns shared by cliques ``i`` and ``j``, in domain order."""
        known = self.__dict__.setdefault("_separators", {})  # kept per tree (it is frozen)
        if (i, j) not in known:
            s = set(self.cliques[i]) & set(self.cliques[j])
            known[(i, j)] = tuple(a for a in self.cliques[i] if a in s)
        return known[(i, j)]

    def neighbours(self, i: int) -> list[int]:
        """Indices of the cliques joined to clique ``i`` by a tree edge."""
        adjacency = self.__dict__.get("_adjacency")
        if adjacency is None:  # built once per tree (a cache on the frozen dataclass)
            adjacency = [[] for _ in self.cliques]
            for a, b in self.edges:
                adjacency[a].append(b)
                adjacency[b].append(a)
            self.__dict__["_adjacency"] = adjacency
        return list(adjacency[i])

    def cells(self) -> list[int]:
        """Number of cells of each clique's table, in clique order."""
        return [self.domain.cells(c) for c in self.cliques]

    def total_cells(self) -> int:
        """Cells over all clique tables together: the model's size."""
        return sum(self.cells())

    def containing(self, attrs: Iterable[str]) -> int | None:
        """Index of the smallest clique that holds every column of ``attrs``, or None."""
        want = frozenset(attrs)
        known = self.__dict__.setdefault("_containing", {})  # answers kept per tree (it is frozen)
        if want in known:
            return known[want]
        best = None
        for i, c in enumerate(self.cliques):
            if want <= set(c) and (best is None or self.domain.cells(c) < self.domain.cells(self.cliques[best])):
                best = i
        known[want] = best
        return best


class UnionFind:
    """Disjoint sets over 0..n-1 (path halving)."""

    def __init__(self, n: int):
        self.root = list(range(n))

    def find(self, x: int) -> int:
        """Root of the set holding ``x`` (halving the path on the way)."""
        root = self.root
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    def union(self, a: int, b: int) -> bool:
        """Joins the sets of a and b; False when they were already one."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.root[ra] = rb
        return True

    def components(self) -> int:
        """Number of disjoint sets."""
        return len({self.find(x) for x in range(len(self.root))})


def _spanning_tree(cliques: Sequence[Clique]) -> list[tuple[int, int]]:
    """Maximum spanning tree by shared-variable count (Kruskal); joins components too."""
    weighted = sorted(
        ((len(set(a) & set(b)), i, j) for i, a in enumerate(cliques) for j, b in enumerate(cliques) if i < j),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    sets = UnionFind(len(cliques))
    return [(i, j) for _, i, j in weighted if sets.union(i, j)]


def build_junction_tree(
    domain: Domain, cliques: Iterable[Iterable[str]], *, max_cells: int | None = None
) -> JunctionTree:
    """Junction tree over ``cliques`` (every domain column included).

    Raises :class:`ModelTooLarge` naming the clique when one clique's table has more
    than ``max_cells`` cells.
    """
    maximal = triangulate(domain, cliques)
    if max_cells is not None:
        for c in maximal:
            if domain.cells(c) > max_cells:
                raise ModelTooLarge(
                    f"the model needs a clique {list(c)} of {domain.cells(c):,} cells, "
                    f"above the limit of {max_cells:,}: give these columns fewer bins or categories in "
                    "the schema, or raise the limit (pgm: max_clique_cells, max_model_cells)"
                )
    # Largest clique first: it becomes the root.
    maximal.sort(key=lambda c: -domain.cells(c))
    edges = _spanning_tree(maximal)
    adj: dict[int, list[int]] = {i: [] for i in range(len(maximal))}
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    parent = [-2] * len(maximal)
    order: list[int] = []
    for start in range(len(maximal)):
        if parent[start] != -2:
            continue
        parent[start] = -1
        queue = [start]
        while queue:
            i = queue.pop(0)
            order.append(i)
            for j in adj[i]:
                if parent[j] == -2:
                    parent[j] = i
                    queue.append(j)
    return JunctionTree(
        domain=domain, cliques=tuple(maximal), edges=tuple(edges), order=tuple(order), parent=tuple(parent)
    )
