"""Smoke run of bench.request_path at a toy size: it runs to the end and prints both cases."""

from __future__ import annotations

from bench import request_path


def test_request_path_runs(capsys) -> None:
    assert request_path.main(["--requests", "16", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 request per read" in out and "8 requests per read" in out


def test_request_path_java_p8_runs(capsys) -> None:
    # Eight partition entries per request; the run itself checks every record reached every partition.
    assert request_path.main(["--requests", "16", "--rounds", "1", "--shape", "java-p8"]) == 0
    out = capsys.readouterr().out
    assert "shape java-p8" in out and "8 requests per read" in out


def test_request_path_java_idempotent_runs(capsys) -> None:
    # Produce v13 by topic id from an idempotent producer, each request the next sequence: the run
    # checks every record was appended (an out-of-order sequence would fail the requests).
    args = ["--requests", "16", "--rounds", "2", "--java", "acksall", "--shape", "java-p8"]
    assert request_path.main(args) == 0
    out = capsys.readouterr().out
    assert "(idempotent)" in out and "1 request per read" in out
