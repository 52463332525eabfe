"""What the remote-tier tests share: a real redis-server (Debian's) on a free loopback port with a
minimal RESP client, and the nodes of a simulated cluster (tests/cache/cluster_node.cpp: kernels
through the compile cache, without PyTorch's start-up)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

BUILD = os.environ.get("NEURON_BUILD_DIR", "build")
NODE = os.path.join(BUILD, "tests", "neuron_cluster_node")
FORGER = os.path.join(BUILD, "tests", "neuron_cache_forger")


class RedisServer:
    """redis-server started on a free loopback port in a temporary directory of its own, nothing
    saved to disk; stop() (or leaving a `with` block) stops it and removes the directory."""

    def __init__(self, *arguments):
        self.directory = tempfile.mkdtemp(prefix="neuron-redis-")
        self.process = None
        up = False
        for _ in range(20):
            self.port = free_port()
            process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.directory, "--logfile",
                 os.path.join(self.directory, "redis.log"), *arguments])
            try:
                up = self._wait_until_up(process)
            finally:
                if not up:
                    process.kill()
                    process.wait()
            if up:
                self.process = process
                break
        if self.process is None:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise RuntimeError("cannot start redis-server on a free port")

    def _wait_until_up(self, process):
        """True once the server on our port is `process` (not another test's server that took the
        port first: INFO's process_id)."""
        for _ in range(500):
            if process.poll() is not None:
                return False
            try:
                if f"process_id:{process.pid}\r\n" in self.command("INFO", "server").decode():
                    return True
            except OSError:
                pass
            time.sleep(0.01)
        return False

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *arguments, timeout=5):
        """Sends one command, returns its reply (bytes, int, list or None); an error reply raises
        RuntimeError."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as connection:
            request = b"*%d\r\n" % len(arguments)
            for argument in arguments:
                data = argument if isinstance(argument, bytes) else str(argument).encode()
                request += b"$%d\r\n%s\r\n" % (len(data), data)
            connection.sendall(request)
            return read_reply(connection.makefile("rb"))

    def keys(self, pattern):
        return sorted(k.decode() for k in self.command("KEYS", pattern))

    def pause(self):
        self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        self.process.send_signal(signal.SIGCONT)

    def kill(self):
        """SIGKILL, as a crash would."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_reply(stream):
    line = stream.readline()
    if not line:
        raise OSError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        return None if int(rest) < 0 else stream.read(int(rest) + 2)[:-2]
    if kind == b"*":
        return None if int(rest) < 0 else [read_reply(stream) for _ in range(int(rest))]
    raise OSError(f"unexpected reply {line!r}")


def write_key(path):
    """A cluster key (what `torchneuron-cache keygen` writes): 64 hex digits, mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


# A round trip to the test's own Redis within this, not the engine's default of 50 ms: that bound
# suits a cluster's network, but on a 2-core machine running a build beside the tests a
# round trip can take longer, which a node would count as a fault the test did not make. The
# fault tests (a hung server) still see their timeouts, a few seconds in all.
REMOTE_TIMEOUT_MS = "1000"


def node_env(cache_dir, remote, key, **extra):
    env = dict(os.environ, NEURON_CACHE_DIR=cache_dir, NEURON_CACHE_REMOTE=remote,
               NEURON_CACHE_KEY_FILE=key)
    env.setdefault("NEURON_CACHE_REMOTE_TIMEOUT_MS", REMOTE_TIMEOUT_MS)
    env.update(extra)
    return {name: value for name, value in env.items() if value is not None}


def start_node(env, *ops, step=False, **popen_options):
    command = [NODE, "run", *(["--step"] if step else []), *ops]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if step else subprocess.DEVNULL, text=True,
                            **popen_options)


def finish(process, timeout=120):
    out, err = process.communicate(timeout=timeout)
    assert out.strip(), err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    result["returncode"] = process.returncode
    return result


def run_node(env, *ops, **popen_options):
    """Runs one node to its end: its JSON result (and its exit status under "returncode")."""
    return finish(start_node(env, *ops, **popen_options))


def store_key(op):
    """The store key of `op`'s kernel (the same on every node of this build and host)."""
    return subprocess.run([NODE, "key", op], capture_output=True, text=True,
                          check=True).stdout.strip()
