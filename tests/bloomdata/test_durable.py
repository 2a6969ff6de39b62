"""bloomdata.durable: atomic replacement through a file object or a path, and clean-up on failure."""

from __future__ import annotations

import os

import pytest

from bloomdata import durable


def _temps(directory) -> list[str]:
    return [name for name in os.listdir(directory) if durable.TEMP_INFIX in name]


def test_write_with_path_publishes_what_the_library_wrote(tmp_path):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    seen = []

    def library_save(path: str) -> None:  # a writer that only takes a path, like safetensors' save_file
        seen.append(path)
        assert target.read_bytes() == b"old"  # the target is untouched while the library writes
        with open(path, "wb") as f:
            f.write(b"new contents")

    durable.write_with_path(target, library_save)
    assert target.read_bytes() == b"new contents"
    assert os.path.dirname(seen[0]) == str(tmp_path) and durable.TEMP_INFIX in os.path.basename(seen[0])
    assert not _temps(tmp_path)


@pytest.mark.parametrize("how", ["path", "file"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, how):
    target = tmp_path / "config.json"
    target.write_text("old")

    def half_then_fail(dest) -> None:
        if how == "path":
            with open(dest, "wb") as f:
                f.write(b"half")
        else:
            dest.write(b"half")
        raise RuntimeError("disk full")

    write = durable.write_with_path if how == "path" else durable.write_with
    with pytest.raises(RuntimeError, match="disk full"):
        write(target, half_then_fail)
    assert target.read_text() == "old"
    assert not _temps(tmp_path)


def test_write_json_is_utf8_with_a_final_newline(tmp_path):
    durable.write_json(tmp_path / "a.json", {"lang": "español", "n": 1}, indent=2)
    assert (tmp_path / "a.json").read_bytes() == '{\n  "lang": "español",\n  "n": 1\n}\n'.encode()


def test_remove_temps_lets_a_writer_that_is_still_finishing_publish_its_temp(tmp_path, monkeypatch):
    # after a failed Dask build, cancelled tasks run to their end while the driver sweeps their temps
    late, dead = tmp_path / f"part.bin{durable.TEMP_INFIX}1-a", tmp_path / f"part.idx{durable.TEMP_INFIX}2-b"
    late.write_text("late")
    dead.write_text("dead")
    real_scandir = os.scandir

    def scandir_then_publish(path):
        entries = list(real_scandir(path))
        late.rename(tmp_path / "part.bin")  # its writer publishes it between the listing and the unlink
        return iter(entries)

    monkeypatch.setattr(durable.os, "scandir", scandir_then_publish)
    assert durable.remove_temps(tmp_path) == 1
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part.bin"]
    assert durable.remove_temps(tmp_path / "removed meanwhile") == 0
