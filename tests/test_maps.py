"""The maps a newcomer reads cannot drift from the files: each package's ``__init__.py`` names every module and
subpackage it holds (a bullet ``- ``name.py`` what it is``) and names nothing that is gone; the README's Map has a
row for every package under ``node/`` and every path it names exists. Files are read as text; nothing is imported.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENTRY = re.compile(r"^- ((?:``[\w./-]+``(?:, | and )?)+)", re.MULTILINE)  # "- ``a.py``, ``b/`` what they hold"
NAME = re.compile(r"``([\w./-]+)``")
PACKAGES = sorted({path.parent for top in ("node", "protocol") for path in (REPO / top).rglob("__init__.py")})


def mapped(package: Path) -> set[str]:
    """The names a package's ``__init__.py`` docstring maps: those that open a bullet."""
    text = (package / "__init__.py").read_text(encoding="utf-8")
    docstring = text.split('"""')[1] if text.startswith('"""') else ""
    return {name for entry in ENTRY.finditer(docstring) for name in NAME.findall(entry.group(1))}


def held(package: Path) -> set[str]:
    """What a map must name: the package's modules (``x.py``) and subpackages (``x/``)."""
    return ({path.name for path in package.glob("*.py") if path.name != "__init__.py"}
            | {f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()})


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: str(path.relative_to(REPO)))
def test_each_package_map_names_every_file_it_holds_and_nothing_that_is_gone(package):
    names = mapped(package)
    assert not sorted(held(package) - names), f"{package.relative_to(REPO)}/__init__.py does not map these"
    gone = sorted(name for name in names if not (package / name.rstrip("/")).exists())
    assert not gone, f"{package.relative_to(REPO)}/__init__.py maps what is not there"


def test_the_readme_map_has_a_row_for_every_package_and_names_only_what_exists():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Map\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w./-]+)`", section, re.MULTILINE)
    assert rows, "the README has no Map table"
    assert not [row for row in rows if not (REPO / row.rstrip("/")).exists()], "the Map names what is not there"
    packages = {f"node/{path.name}/" for path in (REPO / "node").iterdir() if (path / "__init__.py").is_file()}
    assert not sorted(packages - set(rows)), "the README's Map has no row for these packages"


def test_the_map_check_sees_a_file_left_out(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text("")
    (package / "__init__.py").write_text('"""pkg.\n\nFiles:\n- ``a.py``  one\n- ``gone.py``, ``sub/`` two\n"""\n')
    (package / "a.py").write_text("")
    (package / "b.py").write_text("")
    assert mapped(package) == {"a.py", "gone.py", "sub/"} and held(package) == {"a.py", "b.py", "sub/"}
