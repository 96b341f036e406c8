"""The layout shows the architecture, and every dependency points down.

What is read is the code's own imports at run time (ast: those inside functions too, not
those under `if TYPE_CHECKING:`). The layer order is written once, in docs/architecture.md
("Layers": one floor a line, the top first); these checks hold the tree to it:

- no import cycle between modules of service/, nor between its rooms at any depth;
- a room imports only rooms on lower floors, and every room stands on a floor;
- at most 8 modules directly in service/ (the kernel), and a package's `__init__.py` is its
  face: a docstring, no code;
- the middleware chain is written in one module, service/app.py;
- the module map of docs/architecture.md names every module and nothing else.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
KERNEL_MOST = 8


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SERVICE.rglob("*.py")}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(module: str, path: Path) -> set[str]:
    """The modules of service/ that `module` imports when it runs."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                # `from package import module` imports that module, else a name of `base`
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    return {name for name in found if name in MODULES and name != module}


IMPORTS = {module: _imported(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _room(module: str, depth: int) -> str:
    """The room holding `module` at `depth` (1: a child of service/, 2: of its packages...)."""
    return ".".join(module.split(".")[: depth + 1])


def _rooms_graph(depth: int) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imported in IMPORTS.items():
        for other in imported:
            a, b = _room(module, depth), _room(other, depth)
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                graph[a].add(b)
    return graph


def floors() -> list[list[str]]:
    """The layer order of docs/architecture.md: the floors, the top first, each a list of
    rooms (a package or a module directly in service/; `__init__` is service/ itself)."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("\n## Layers\n") :]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "docs/architecture.md, Layers: no fenced block of floors"
    return [line.split() for line in block.group(1).splitlines() if line.strip()]


def _floor_of() -> dict[str, int]:
    placed: dict[str, int] = {}
    for number, rooms in enumerate(reversed(floors())):
        for room in rooms:
            assert room not in placed, f"{room} stands on two floors"
            placed[room] = number
    return placed


def _top_room(module: str) -> str:
    return "__init__" if module == "service" else module.split(".")[1]


def test_no_module_imports_itself_round_a_circle() -> None:
    assert _cycles(IMPORTS) == []


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_no_room_imports_itself_round_a_circle(depth: int) -> None:
    assert _cycles(_rooms_graph(depth)) == []


def test_every_room_stands_on_a_floor() -> None:
    placed = _floor_of()
    rooms = {_top_room(module) for module in MODULES}
    assert sorted(rooms - placed.keys()) == [], "rooms missing from the Layers of the docs"
    assert sorted(placed.keys() - rooms) == [], "floors name rooms that do not exist"


def test_a_room_imports_only_rooms_below_it() -> None:
    placed = _floor_of()
    upward = sorted(
        f"{module} -> {other}"
        for module, imported in IMPORTS.items()
        for other in imported
        if _top_room(module) != _top_room(other)
        and placed[_top_room(other)] >= placed[_top_room(module)]
    )
    assert upward == []


def test_the_kernel_is_a_handful_of_modules() -> None:
    kernel = sorted(p.name for p in SERVICE.glob("*.py"))
    assert len(kernel) <= KERNEL_MOST, kernel


def test_a_package_init_is_a_face() -> None:
    """Docstring only (service/ itself may also say its version): what a package holds is
    in its modules, and docs/architecture.md maps them."""
    faces = [p for p in SERVICE.rglob("__init__.py") if p.parent != SERVICE]
    with_code = []
    for path in faces:
        body = ast.parse(path.read_text()).body
        if len(body) != 1 or not isinstance(body[0], ast.Expr):
            with_code.append(str(path.relative_to(ROOT)))
    assert with_code == []


def test_the_middleware_chain_is_written_in_one_module() -> None:
    writers = sorted(
        str(path.relative_to(ROOT))
        for path in MODULES.values()
        if any(
            isinstance(node, ast.Attribute) and node.attr == "middlewares"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert writers == ["service/app.py"]


def _mapped_modules() -> dict[str, set[str]]:
    """The module map of docs/architecture.md: each package's header line (`service/x/`,
    at the start of a line of the map's block) and the module files that the indented
    lines under it start with."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("\n## Module map") :]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "docs/architecture.md, Module map: no fenced block"
    mapped: dict[str, set[str]] = defaultdict(set)
    package = ""
    for line in block.group(1).splitlines():
        header = re.match(r"(service/(?:[a-z_]+/)*)\s", line + " ")
        if header:
            package = header.group(1)
            continue
        named = re.match(r"\s{2,}((?:[a-z_]+\.(?:py|lua)(?:,?\s+|$))+)", line)
        if named:  # the module files an indented line starts with, before what they do
            mapped[package].update(re.findall(r"[a-z_]+\.(?:py|lua)", named.group(1)))
    return mapped


def test_the_module_map_names_every_module() -> None:
    mapped = _mapped_modules()
    tree: dict[str, set[str]] = defaultdict(set)
    for path in [*SERVICE.rglob("*.py"), *SERVICE.rglob("*.lua")]:
        if path.name != "__init__.py":
            tree[str(path.parent.relative_to(ROOT)) + "/"].add(path.name)
    missing = {p: sorted(names - mapped[p]) for p, names in tree.items() if names - mapped[p]}
    stale = {p: sorted(names - tree[p]) for p, names in mapped.items() if names - tree[p]}
    assert missing == {}, "modules the map of docs/architecture.md does not name"
    assert stale == {}, "the map names modules that do not exist"
