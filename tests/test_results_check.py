"""Results that carry their own check: run.json records requests.parquet's rows, size and SHA-256
when the writer puts it in place, every Parquet page carries a CRC, and the reports refuse, with one
line and exit 2, a file that differs or holds values no request can have, instead of reading them.
Single bytes of a real run's requests.parquet are flipped at random (seeded) positions."""

from __future__ import annotations

import json
import os
import random
import shutil

import pyarrow.parquet as pq
import pytest

from reports.cli import main
from runfolder.reading import load_run
from tests.helpers import run_locust, simulator

pytestmark = pytest.mark.process

FLIPS = 60


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    with simulator("--profile", "fixed") as url:
        done = run_locust(
            "--host",
            url,
            "--model",
            "sim-model",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "3s",
            "--max-tokens-override",
            "16",
            "--results-dir",
            str(tmp),
            "--run-id",
            "run",
            "--stop-timeout",
            "5",
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "run"


def flipped(src, dst, position: int, rng: random.Random):
    shutil.copytree(src, dst)
    path = dst / "requests.parquet"
    data = bytearray(path.read_bytes())
    data[position] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return dst


def one_line_or_identical(capsys, folder, original) -> str:
    code = main(["show", str(folder)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    if code == 0:
        assert load_run(str(folder)).df.equals(original), "changed values were read as data"
        return "identical"
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_run_json_records_the_records_file(finished_run):
    with open(finished_run / "run.json") as f:
        entry = json.load(f)["files"]["requests.parquet"]
    assert entry["rows"] == pq.read_metadata(finished_run / "requests.parquet").num_rows > 0
    assert entry["bytes"] == os.path.getsize(finished_run / "requests.parquet") and len(entry["sha256"]) == 64


def test_every_flipped_byte_is_refused_with_one_line(finished_run, tmp_path, capsys):
    original = load_run(str(finished_run)).df
    size = os.path.getsize(finished_run / "requests.parquet")
    rng = random.Random(26)
    for i, position in enumerate(rng.sample(range(size), FLIPS)):
        folder = flipped(finished_run, tmp_path / f"f{i}", position, rng)
        said = one_line_or_identical(capsys, folder, original)
        assert "SHA-256" in said, (position, said)
    # the report and a compare gate refuse it too, before any number
    folder = flipped(finished_run, tmp_path / "gate", size // 2, rng)
    assert main(["build", str(folder)]) == 2
    assert main(["compare", str(finished_run), str(folder), "--fail-on", "e2e.mean>+10%"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: ") == 2, err


def test_without_a_recorded_checksum_page_checksums_and_ranges_still_refuse_garbage(finished_run, tmp_path, capsys):
    """A folder whose run.json records no checksum (written before it was recorded): a flipped byte
    is refused with one line (a page's CRC, a file pyarrow cannot read, values out of range) or
    reads the same data (a byte of metadata no value depends on); never a traceback, never
    changed values."""
    original = load_run(str(finished_run)).df
    size = os.path.getsize(finished_run / "requests.parquet")
    rng = random.Random(7)
    outcomes = []
    for i, position in enumerate(rng.sample(range(size), FLIPS)):
        folder = flipped(finished_run, tmp_path / f"f{i}", position, rng)
        run = json.loads((folder / "run.json").read_text())
        run.pop("files", None)
        (folder / "run.json").write_text(json.dumps(run))
        outcomes.append(one_line_or_identical(capsys, folder, original))
    assert any(o != "identical" for o in outcomes)  # about half: the others hit metadata no value depends on


def test_values_no_request_can_have_are_refused(finished_run, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.compute as pc

    folder = tmp_path / "negative"
    shutil.copytree(finished_run, folder)
    table = pq.read_table(folder / "requests.parquet")
    e2e = table.column("e2e_s")
    table = table.set_column(table.schema.get_field_index("e2e_s"), "e2e_s", pc.multiply(e2e, pa.scalar(-1.0)))
    pq.write_table(table, folder / "requests.parquet")
    run = json.loads((folder / "run.json").read_text())
    run.pop("files", None)
    (folder / "run.json").write_text(json.dumps(run))
    assert main(["show", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "negative or infinite e2e_s" in err, err


def test_a_page_whose_dictionary_index_runs_past_its_dictionary_is_refused_with_one_line(capsys):
    """A byte flipped in a records file without a recorded checksum (a whole-suite run found it):
    every page's CRC passed and pyarrow read the table, and only its conversion to a DataFrame found a
    dictionary index past the dictionary's end. `reports show` printed a traceback."""
    folder = os.path.join(os.path.dirname(__file__), "damaged", "dictionary_index")
    code = main(["show", folder])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err + out
    assert err.strip().splitlines() == [
        f"error: {os.path.join(folder, 'requests.parquet')}: cannot be read, the file is damaged (Index 0 out of "
        "bounds); restore it from a copy"
    ]
