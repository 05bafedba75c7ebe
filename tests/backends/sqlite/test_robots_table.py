"""control.sqlite's ``robots`` table: a record is read until it expires, and expired records
go at the next write (times given, no sleeping)."""

from __future__ import annotations

from pathlib import Path

from scrapy_frontier.backends.sqlite.control import ControlFile


def test_a_record_lasts_until_it_expires_and_then_goes(tmp_path: Path) -> None:
    file = ControlFile(tmp_path)
    try:
        file.save_robots("http://a.example", b"first", expires=100.0, now=0.0)
        file.save_robots("http://b.example", b"second", expires=300.0, now=0.0)
        assert file.robots("http://a.example", 99.9) == b"first"
        assert file.robots("http://a.example", 100.0) is None
        assert file.robots("http://c.example", 0.0) is None
        file.save_robots("http://b.example", b"third", expires=400.0, now=150.0)
        assert file.conn is not None
        rows = file.conn.execute("SELECT origin, record FROM robots").fetchall()
        assert rows == [("http://b.example", b"third")]  # a.example expired, b replaced
    finally:
        file.close()
    reopened = ControlFile(tmp_path)
    try:
        assert reopened.robots("http://b.example", 200.0) == b"third"
    finally:
        reopened.close()
