"""The c10d backend "neuron" and DDP on the device (docs/distributed.md), in one 2-rank job
(ddp_job.py, rendezvous through a file store: no port to race for) whose ranks report what they
saw; each test checks one part of the report. Rank 1 kills itself at the end of the job."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

JOB = os.path.join(os.path.dirname(__file__), "ddp_job.py")
TIMEOUT_S = 30  # the process group's timeout
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def job():
    scratch = tempfile.mkdtemp(prefix="neuron-ddp-job-")
    try:
        # One cold compile cache for both ranks, as a job's ranks on one node share one.
        env = dict(os.environ, NEURON_FALLBACK="silent",
                   NEURON_CACHE_DIR=os.path.join(scratch, "cache"))
        ranks = [subprocess.Popen([sys.executable, JOB, str(r), os.path.join(scratch, "store"),
                                   scratch, str(TIMEOUT_S)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        outputs = [rank.communicate(timeout=300) for rank in ranks]
        reports = []
        for r in (0, 1):
            path = os.path.join(scratch, f"rank{r}.json")
            reports.append(json.load(open(path)) if os.path.exists(path) else {})
        yield {"reports": reports, "exit_codes": [rank.returncode for rank in ranks],
               "stderr": [err for _, err in outputs]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def part(job, key):
    """Both ranks' values of `key`; a rank that never got there fails the test with its stderr."""
    values = []
    for r, report in enumerate(job["reports"]):
        assert key in report, f"rank {r} did not report {key}:\n{job['stderr'][r][-3000:]}"
        values.append(report[key])
    return values


def test_job_runs_to_the_end_and_only_the_killed_rank_dies(job):
    assert job["reports"][0].get("done"), job["stderr"][0][-3000:]
    assert job["exit_codes"] == [0, -9], job["stderr"]
    assert part(job, "backend") == ["neuron", "neuron"]


def test_collectives_equal_gloo_on_cpu_tensors(job):
    for r, results in enumerate(part(job, "collectives")):
        failed = [name for name, ok in results.items() if not ok]
        assert not failed, f"rank {r}: {failed}"
        # sum, max, min, product in four dtypes, band, bor, bxor, avg, broadcast, reduce,
        # all_gather, gather, scatter, send/recv, recv from any source, futures
        assert len(results) == 28


def test_ddp_matches_one_process_on_the_concatenated_batch(job):
    losses = part(job, "ddp_losses")
    report = job["reports"][0]
    assert len(losses[0]) == 20 and losses[0] == losses[1]
    assert part(job, "ddp_replicas_identical") == [True, True]
    for step, (ddp, single) in enumerate(zip(losses[0], report["single_losses"])):
        assert abs(ddp - single) <= TOLERANCE, (step, ddp, single)
    assert report["ddp_vs_single_max_weight_diff"] <= TOLERANCE
    assert losses[0][-1] < losses[0][0] / 2  # it trained
    # The gradients went through several buckets (as DDP rebuilt them after the first step).
    assert len(part(job, "ddp_bucket_sizes")[0].split(",")) > 1


def test_no_sync_accumulates_locally_then_averages(job):
    for differ in part(job, "no_sync_local_grads_differ"):
        assert all(differ)  # nothing was reduced under no_sync()
    for diff in part(job, "no_sync_max_grad_diff"):
        assert diff <= TOLERANCE


def test_find_unused_parameters(job):
    assert part(job, "unused_parameter_unchanged") == [True, True]
    used = part(job, "unused_used_weights")
    assert used[0] == used[1]


def test_batch_norm_buffers_are_broadcast_from_rank_0(job):
    trained = part(job, "bn_mean_after_training")
    assert trained[0] != trained[1]  # each rank's running statistics saw its own data
    after_forward = part(job, "bn_mean_after_eval_forward")
    assert after_forward == [trained[0], trained[0]]


def test_checkpoint_saved_by_rank_0_loads_on_every_rank(job):
    assert part(job, "checkpoint_matches") == [True, True]
    assert part(job, "checkpoint_on_device") == [True, True]


def test_mismatched_collective_is_an_error_naming_the_op(job):
    for message in part(job, "mismatch_error"):
        assert message is not None
        assert "mismatched collective all_reduce" in message
        assert "rank 0 calls all_reduce(sum) on float32[3]" in message
        assert "rank 1 calls all_reduce(sum) on float32[4]" in message
    assert part(job, "after_errors") == [[2.0, 2.0], [2.0, 2.0]]  # the group still works


def test_mixing_device_and_cpu_tensors_is_an_error(job):
    for message in part(job, "mixed_error"):
        assert message is not None
        assert "all_gather mixes devices (privateuseone:0 and cpu)" in message


def test_a_killed_rank_fails_the_other_within_the_timeout(job):
    report = job["reports"][0]
    message = report["killed_rank_error"]
    assert message is not None and "all_reduce(sum) on float32[4] on rank 0 of 2 failed" in message
    assert report["killed_rank_seconds"] < TIMEOUT_S


def test_the_ranks_of_a_cold_job_compile_each_kernel_once(job):
    compiles, hits = part(job, "compiles"), part(job, "persistent_hits")
    kernels = compiles[0] + hits[0]
    assert kernels > 0 and compiles[1] + hits[1] == kernels
    assert compiles[0] + compiles[1] == kernels, (compiles, hits)
