"""Packaging: the source folders node/ and protocol/ install as ftis.node and ftis.protocol, and
every subpackage is listed, so `pip install .` (not only `-e .`) ships all of it."""

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = {"node": "ftis.node", "protocol": "ftis.protocol"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages_on_disk() -> set[str]:
    found = set()
    for folder, package in SOURCE_FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    return found


def test_every_subpackage_is_listed_in_pyproject():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {package: folder for folder, package in SOURCE_FOLDERS.items()}
    assert set(setuptools["packages"]) == _packages_on_disk()


def test_vllm_is_only_an_extra():
    project = _pyproject()["project"]
    assert not any(dep.startswith("vllm") for dep in project["dependencies"])
    assert any(dep.startswith("vllm") for dep in project["optional-dependencies"]["vllm"])


def test_a_built_wheel_holds_every_module(tmp_path):
    # Build from a copy of what the wheel is made of, so that no build/ folder lands in the source tree.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in SOURCE_FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "wheels"), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "wheels").glob("ftis_node-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in SOURCE_FOLDERS.items():
        for module in (ROOT / folder).rglob("*.py"):
            relative = module.relative_to(ROOT / folder)
            assert f"{package.replace('.', '/')}/{relative.as_posix()}" in names
    assert any(name.endswith("entry_points.txt") for name in names)
    for package, patterns in _pyproject()["tool"]["setuptools"]["package-data"].items():  # the dashboard's page...
        folder = _source_folder(package)
        for pattern in patterns:
            files = list(folder.glob(pattern))
            assert files, f"{package}: {pattern} matches no file"
            for file in files:
                assert f"{package.replace('.', '/')}/{file.relative_to(folder).as_posix()}" in names


def _source_folder(package: str) -> Path:
    """The source folder of an installed package name: ftis.node.demo -> node/demo."""
    for folder, top in SOURCE_FOLDERS.items():
        if package == top:
            return ROOT / folder
        if package.startswith(top + "."):
            return ROOT / folder / package.removeprefix(top + ".").replace(".", "/")
    raise AssertionError(f"{package} is in no source folder")


def test_benchmarks_import_only_the_product_and_their_own_modules():
    """A benchmark measures what a user installs: it imports ftis, third-party packages and benchmarks/, never the
    tests' helpers, and never edits sys.path to reach them."""
    helpers = {path.stem for path in (ROOT / "tests" / "helpers").glob("*.py")} | {"helpers"}
    for module in (ROOT / "benchmarks").rglob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in helpers, f"{module.relative_to(ROOT)} imports {name}"
        assert "sys.path" not in module.read_text(encoding="utf-8"), f"{module.relative_to(ROOT)} edits sys.path"
