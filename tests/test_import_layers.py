"""The import graph keeps the layer order written in docs/development.md ("Layers"): no package imports one of its
own layer or above, there are no import cycles between packages, and ``node.config`` imports only itself and the
protocol.

Run: python -m pytest tests/test_import_layers.py -q

Every ``import ftis...`` and ``from ftis... import`` of ``node/`` and ``protocol/`` counts, at module level, inside a
function or under ``TYPE_CHECKING`` alike: the files are read with ``ast``, nothing is imported. A package here is
``protocol`` (all of ``ftis.protocol``) or ``node.<name>``, a folder or a module directly under ``node/``.
"""

import ast
import itertools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYERS_DOC = REPO / "docs" / "development.md"
SOURCES = {"ftis.node": REPO / "node", "ftis.protocol": REPO / "protocol"}
ROOT = "node"  # node/__init__.py: it maps the files and imports nothing
ITEM = re.compile(r"(\d+)\. ((?:`[\w.]+`(?:, )?)+) — ")  # "4. `node.loss`, `node.models` — what they hold"


@dataclass(frozen=True)
class Import:
    source: str  # the importing package, e.g. "node.warmup"
    target: str  # the imported one, e.g. "node.runner"
    where: str  # "node/warmup/train.py:107"


def layers() -> dict[str, int]:
    """Each package's layer (1: the bottom), from the numbered list of the "Layers" section."""
    text = LAYERS_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layer: dict[str, int] = {}
    for match in ITEM.finditer(section):
        for name in re.findall(r"`([\w.]+)`", match.group(2)):
            assert name not in layer, f"docs/development.md lists {name} twice under Layers"
            layer[name] = int(match.group(1))
    assert layer, "docs/development.md has no numbered list of layers under '## Layers'"
    return layer


def package_of(module: str) -> str:
    """``ftis.protocol.limits`` -> ``protocol``, ``ftis.node.swarm.exchange.inbox`` -> ``node.swarm``, ``ftis.node`` ->
    ``node``."""
    parts = module.split(".")
    if parts[1] == "protocol":
        return "protocol"
    return ".".join(parts[1:3])


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the two packages: its dotted name and its file."""
    for prefix, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            yield ".".join([prefix, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]])), path


def imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules one statement imports (``from ftis.node import figures`` imports ``ftis.node.figures``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's own package, up level - 1
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    if base in SOURCES or base == "ftis":
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def imports() -> list[Import]:
    """Every import of one package by another, where it is written."""
    found = []
    for module, path in modules():
        source = package_of(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in imported(module, path, node):
                if name.startswith("ftis.") and (target := package_of(name)) != source:
                    found.append(Import(source, target, f"{path.relative_to(REPO)}:{node.lineno}"))
    return found


def test_every_package_has_one_layer():
    layer = layers()
    packages = {package_of(module) for module, _ in modules()} - {ROOT}
    assert not packages - layer.keys(), (
        f"packages with no layer in docs/development.md: {sorted(packages - layer.keys())}")
    assert not layer.keys() - packages, f"layers name no such package: {sorted(layer.keys() - packages)}"


def test_the_root_package_imports_nothing():
    assert not [found.where for found in imports() if found.source == ROOT]


def test_no_package_imports_its_own_layer_or_above():
    layer = layers()
    upward = [f"{found.where}: {found.source} (layer {layer[found.source]}) imports {found.target} "
              f"(layer {layer[found.target]})"
              for found in imports() if found.source != ROOT and layer.get(found.target, 0) >= layer[found.source]]
    assert not upward, "imports against the layers of docs/development.md:\n" + "\n".join(upward)


def test_no_import_cycles_between_packages():
    edges: dict[str, dict[str, str]] = defaultdict(dict)  # source -> target -> the first place it is imported
    for found in imports():
        edges[found.source].setdefault(found.target, found.where)
    cycle = find_cycle(edges)
    assert cycle is None, "an import cycle: " + ", ".join(
        f"{a} -> {b} ({edges[a][b]})" for a, b in itertools.pairwise(cycle))


def test_no_import_cycles_between_the_modules_of_a_package():
    """Inside a package too (``models``: ``loading`` -> ``gguf`` -> ``loading`` was one, broken by a function-local
    import): a module's errors and tables live below the modules that use them."""
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    names = {module for module, _ in modules()}
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name in imported(module, path, node):
                    if (name in names and name != module and package_of(name) == package_of(module)
                            and not name.endswith(".__init__") and path.name != "__init__.py"
                            and name != module.rsplit(".", 1)[0]):
                        edges[module].setdefault(name, f"{path.relative_to(REPO)}:{node.lineno}")
    cycle = find_cycle(edges)
    assert cycle is None, "an import cycle: " + ", ".join(
        f"{a} -> {b} ({edges[a][b]})" for a, b in itertools.pairwise(cycle))


def swarm_rooms() -> dict[str, int]:
    """Each room (or top-level module) of ``node.swarm`` and its place, bottom first, from docs/development.md's
    "rooms of `node.swarm`: `a`; `b`, `c`; ..." (groups separated by semicolons share a place)."""
    section = LAYERS_DOC.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    listed = " ".join(section.split()).split("rooms of `node.swarm`:", 1)[1].split(".", 1)[0]
    return {name: place for place, group in enumerate(listed.split(";")) for name in re.findall(r"`(\w+)`", group)}


def test_the_rooms_of_the_swarm_import_only_rooms_below_their_own():
    place = swarm_rooms()
    folder = SOURCES["ftis.node"] / "swarm"
    units = {path.stem for path in folder.glob("*.py")} | {path.name for path in folder.iterdir()
                                                           if (path / "__init__.py").is_file()}
    assert units - {"__init__"} == set(place), "docs/development.md's rooms of node.swarm are not the folder's"
    upward = []
    for module, path in modules():
        parts = module.split(".")
        if parts[:3] != ["ftis", "node", "swarm"] or len(parts) < 4:
            continue
        source = parts[3]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name in imported(module, path, node):
                    target = name.split(".")
                    if target[:3] == ["ftis", "node", "swarm"] and len(target) > 3 and target[3] != source \
                            and place.get(target[3], -1) >= place[source]:
                        upward.append(f"{path.relative_to(REPO)}:{node.lineno}: {source} imports {target[3]}")
    assert not upward, "imports against the rooms' order in docs/development.md:\n" + "\n".join(upward)


def test_config_imports_only_itself_and_the_protocol():
    outside = [f"{found.where}: imports {found.target}" for found in imports()
               if found.source == "node.config" and found.target != "protocol"]
    assert not outside, "node.config imports the node outside itself:\n" + "\n".join(outside)


def find_cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of the graph as its nodes, the first repeated at the end; None when there is none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for target in edges.get(node, {}):
            if (cycle := visit(target, [*path, node])) is not None:
                return cycle
        done.add(node)
        return None

    for start in sorted(edges):
        if (cycle := visit(start, [])) is not None:
            return cycle
    return None


def test_the_cycle_finder_sees_a_cycle_and_no_false_one():
    assert find_cycle({"a": {"b": ""}, "b": {"c": ""}, "c": {"a": ""}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": "", "c": ""}, "b": {"c": ""}}) is None
