"""core/files.py: a results file is written whole or not at all, and a failed write leaves nothing."""

from __future__ import annotations

import json

import pytest

from core.files import write_atomic, write_json


def test_a_write_replaces_the_whole_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    write_json(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "run.json"
    target.mkdir()  # the rename onto it fails, as a write on a full disk does, after the .tmp exists
    with pytest.raises(OSError):
        write_atomic(str(target), "new")
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"] and target.is_dir()


def test_nan_is_refused(tmp_path):
    with pytest.raises(ValueError):
        write_json(str(tmp_path / "x.json"), {"p99": float("nan")})
    assert list(tmp_path.iterdir()) == []
