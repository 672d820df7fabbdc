"""specviz.outfiles: a result file is written whole or not at all, and the report, the bench
and the GPU check write theirs through it."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from specviz import outfiles

ROOT = Path(__file__).resolve().parents[1]


def test_a_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    path = tmp_path / "result.json"
    assert outfiles.write_json(path, {"speedup": 1.5, "cpu": "EPYC é"}) == path
    assert json.loads(path.read_text(encoding="utf-8")) == {"speedup": 1.5, "cpu": "EPYC é"}
    before = path.read_bytes()
    # strict JSON refuses NaN before anything is written
    with pytest.raises(ValueError):
        outfiles.write_json(path, {"speedup": math.nan}, allow_nan=False)
    # a failure while the file is being put in place leaves the previous file, no temporary
    real = os.replace

    def fails(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fails)
    with pytest.raises(OSError, match="disk full"):
        outfiles.write_text(path, "half")
    monkeypatch.setattr(os, "replace", real)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    rows = [{"a": 1, "b": "x"}, {"a": 2, "c": 3.5}]
    csv = outfiles.write_csv(tmp_path / "rows.csv", rows).read_text(encoding="utf-8")
    assert csv.splitlines() == ["a,b,c", "1,x,", "2,,3.5"]


@pytest.mark.parametrize("package", ["report", "bench", "gpucheck"])
def test_the_result_writers_write_through_outfiles(package) -> None:
    """No module of the report, the bench or the GPU check writes a file its own way (the
    report's append-only log of finished prompts aside, which fsyncs each line, and the
    bench's PNG copies, which kaleido writes)."""
    own = re.compile(r"(?<!outfiles)\.(write_text|write_bytes|to_csv)\(|open\([^)]*[\"']w[\"']")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "specviz" / package).glob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if own.search(line)
    ]
    assert not found, found
