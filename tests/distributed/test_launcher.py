"""`python3 -m torchneuron.run` (torchrun's arguments, no --redirects/--tee work-around) runs the
unchanged example DDP script as a 2-node job: two launcher invocations on loopback, node 0
hosting the rendezvous at a port this test holds reserved until the launcher takes it."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ddp_train.py")


def reserved_loopback_port():
    """A port no other process can be handed while this socket lives: it is bound (never
    listened on) with SO_REUSEADDR, which the rendezvous store's listening socket also sets, so
    the store can take it over and no ephemeral bind or connect gets it meanwhile."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


def test_two_nodes_on_loopback_train_the_example_in_step():
    holder = reserved_loopback_port()
    port = holder.getsockname()[1]
    # torchrun's agents make their log directories under TMPDIR and leave them: the test's own.
    scratch = tempfile.mkdtemp(prefix="neuron-launcher-")
    env = dict(os.environ, NEURON_FALLBACK="silent", TMPDIR=scratch)
    try:
        nodes = [subprocess.Popen(
            [sys.executable, "-m", "torchneuron.run", "--nnodes=2", f"--node_rank={node}",
             "--nproc_per_node=1", f"--rdzv_endpoint=127.0.0.1:{port}", "--monitor_interval=1",
             EXAMPLE, "--epochs", "2"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for node in (0, 1)]
        outputs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        holder.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for node, out in zip(nodes, outputs):
        assert node.returncode == 0, out[-4000:]
        assert "AttributeError" not in out
    everything = "".join(outputs)
    checksums = dict(re.findall(r"rank (\d) of 2: weights checksum (\S+)", everything))
    assert sorted(checksums) == ["0", "1"], everything[-4000:]
    assert checksums["0"] == checksums["1"]  # the replicas stayed in step
    losses = [float(x) for x in re.findall(r"epoch \d loss (\S+)", everything)]
    assert len(losses) == 2 and losses[1] < losses[0]
