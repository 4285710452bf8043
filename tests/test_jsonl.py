"""The one JSONL codec: records round-trip byte for byte, and a bad or missing file is named with its line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from pipeline import jsonl


class Row(BaseModel):
    name: str
    count: int


class CustomError(ValueError):
    pass


def test_records_round_trip_in_order_and_the_text_is_one_object_per_line(tmp_path):
    rows = [Row(name="b", count=2), Row(name="a", count=1)]
    path = tmp_path / "deep" / "rows.jsonl"
    jsonl.write(path, iter(rows))
    assert path.read_text() == '{"name":"b","count":2}\n{"name":"a","count":1}\n' == jsonl.dumps(rows)
    assert jsonl.read(path, Row) == rows


def test_a_bad_line_is_named_by_file_and_line_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"name":"a","count":1}\n\n{"name":"b","count":"many"}\n')
    with pytest.raises(CustomError, match=r"rows.jsonl:3: not a Row"):
        jsonl.read(path, Row, CustomError)
    path.write_text('{"name":"a","count":1}\n\n')
    assert jsonl.read(path, Row) == [Row(name="a", count=1)]


def test_a_missing_file_is_named_with_what_was_expected_there(tmp_path):
    with pytest.raises(CustomError, match=r"absent.jsonl: missing \(an evaluation folder\)"):
        jsonl.read(tmp_path / "absent.jsonl", Row, CustomError, missing="an evaluation folder")
