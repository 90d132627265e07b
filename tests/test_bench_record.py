"""benchmarks/record.py: every benchmark figure is one JSON line with the machine, the commit and its name."""

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_figure_is_one_json_line_in_the_benchmarks_file(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("IDCGEN_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "bench_fuzz.py"), "--budget", "8"])
    from record import record

    record("loop throughput", 1234.5, unit="execs/s", batch=256)
    record("loop / raw forward", 0.5, unit="x")
    lines = (tmp_path / "bench_fuzz.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert (first["bench"], first["figure"], first["value"], first["unit"]) == (
        "bench_fuzz",
        "loop throughput",
        1234.5,
        "execs/s",
    )
    assert first["context"] == {"batch": 256} and first["argv"] == ["--budget", "8"]
    assert len(first["commit"].split("+")[0]) == 40 and first["machine"]["cores"] >= 1 and first["machine"]["host"]
    assert json.loads(lines[1])["figure"] == "loop / raw forward"


def test_every_benchmark_script_records_what_it_prints():
    scripts = sorted(BENCHMARKS.glob("bench_*.py"))
    assert len(scripts) >= 10
    assert [p.name for p in scripts if "record(" not in p.read_text()] == []
