"""``common.tables``: CSV rows written and read back, the gzip bytes independent of the time they were written."""
from __future__ import annotations

import gzip

from common.tables import read_csv, write_csv


def test_rows_round_trip_with_floats_at_their_digits_and_late_columns_kept(tmp_path):
    rows = [{"method": "hgpo", "seed": 1, "pearson": 0.123456789}, {"method": "a,b", "seed": 2, "extra": 1.5}]
    for name in ("t.csv", "t.csv.gz"):
        write_csv(tmp_path / name, rows, digits=4)
        assert read_csv(tmp_path / name) == [{"method": "hgpo", "seed": "1", "pearson": "0.1235", "extra": ""},
                                             {"method": "a,b", "seed": "2", "pearson": "", "extra": "1.5"}]
    write_csv(tmp_path / "none.csv", [])
    assert not (tmp_path / "none.csv").exists()


def test_the_same_rows_give_the_same_gzip_bytes(tmp_path, monkeypatch):
    import time

    write_csv(tmp_path / "a.csv.gz", [{"x": 1.0}])
    monkeypatch.setattr(time, "time", lambda: 2e9)  # a gzip header would carry this time stamp
    write_csv(tmp_path / "b.csv.gz", [{"x": 1.0}])
    assert (tmp_path / "a.csv.gz").read_bytes() == (tmp_path / "b.csv.gz").read_bytes()
    assert gzip.decompress((tmp_path / "a.csv.gz").read_bytes()).decode().splitlines() == ["x", "1"]
