"""The persistent store's micro benchmarks (bench/micro/store_bench.cpp, docs/persistent-cache.md)
run to the end: every lookup of the 10,000-entry store finds its entry and the miss misses (a
benchmark that found otherwise reports an error), each write succeeds, and the stores they fill
are removed when the program exits."""
import json
import os
import subprocess

BUILD = os.environ.get("NEURON_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
MICRO_BENCH = os.path.join(BUILD, "bench", "neuron_micro_bench")


def test_store_benchmarks_run_correctly_and_leave_nothing(tmp_path):
    temporary = tmp_path / "tmp"
    temporary.mkdir(mode=0o700)
    done = subprocess.run([MICRO_BENCH, "--benchmark_filter=BM_Store", "--benchmark_format=json",
                           "--benchmark_min_time=0.01"],
                          env=dict(os.environ, TMPDIR=str(temporary)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["benchmarks"]
    assert {r["name"] for r in runs} == {
        "BM_StoreFirstLookups/entries:100/real_time", "BM_StoreFirstLookups/entries:10000/real_time",
        "BM_StoreWrite/entries:10000/cap:0/real_time",
        "BM_StoreWrite/entries:10000/cap:1073741824/real_time"}
    for r in runs:
        assert not r.get("error_occurred"), (r["name"], r.get("error_message"))
        assert r["iterations"] >= 1
    assert list(temporary.iterdir()) == []
