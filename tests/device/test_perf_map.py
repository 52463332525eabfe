"""NEURON_PERF_MAP=1 (src/launcher/perf_map.h): every kernel the process links gets a line
"<start> <size> neuron_kernel_<key>" in /tmp/perf-<pid>.map, the file Linux perf reads to name
code in anonymous mappings. Checked in fresh processes (settings are read at import): each line
names code that is really there (an executable mapping of the process holds its whole range),
one line per kernel linked, nothing written without the variable, a link planted at the path is
not followed, nor a hard link, nor a FIFO opened (one line on stderr, ops still right, nothing
blocks), a stale map of an earlier process of the same pid is emptied first, and a forked child
writes its own pid's map."""

import os
import re
import subprocess
import sys
import tempfile

LINE = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) (neuron_kernel_[0-9a-f]{16})$")

# Compiles (or loads) a few kernels, then prints its pid, the kernels linked, and for each map
# line whether one executable mapping of this process holds all of its bytes.
PROGRAM = r"""
import os, torch, torchneuron
print("pid", os.getpid(), flush=True)
d = torchneuron.device()
x = torch.arange(64, dtype=torch.float32, device=d)
y = ((x * 2 + 1).tanh() - x.sin()).relu()
assert torch.allclose(y.cpu(), ((torch.arange(64.) * 2 + 1).tanh() - torch.arange(64.).sin()).relu())
torchneuron.synchronize()
m = torchneuron.metrics()
print("linked", m["compiles"] + m["persistent_hits"] + m.get("remote", {}).get("hits", 0))
path = f"/tmp/perf-{os.getpid()}.map"
executable = []
for row in open("/proc/self/maps"):
    span, perms = row.split()[:2]
    lo, hi = (int(v, 16) for v in span.split("-"))
    if "x" in perms:
        executable.append((lo, hi))
if os.path.isfile(path) and not globals().get("planted"):
    for line in open(path):
        start, size = (int(v, 16) for v in line.split()[:2])
        inside = any(lo <= start and start + size <= hi for lo, hi in executable)
        print("inside" if inside else "outside", line.strip())
"""


def run(program, **env):
    """Runs `program` (which prints "pid N" first) in a fresh process and returns it done, with
    the map lines of every pid it printed ("pid", "child") as `maps` (None where none was
    written); the maps are removed, also when the program failed."""
    full = dict(os.environ, NEURON_CACHE="0", NEURON_INTERIM_LAUNCHES="0")
    full.pop("NEURON_PERF_MAP", None)
    full.update(env)
    done = subprocess.run([sys.executable, "-c", program], env=full, capture_output=True,
                          text=True, timeout=300)
    done.maps = {}
    for pid in re.findall(r"^(?:pid|child) (\d+)$", done.stdout, re.M):
        path = f"/tmp/perf-{pid}.map"
        done.maps[int(pid)] = None
        if os.path.lexists(path):
            if os.path.isfile(path) and not os.path.islink(path):  # not a planted link or FIFO
                with open(path) as f:
                    done.maps[int(pid)] = f.read().splitlines()
            os.remove(path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def pid_of(done):
    return int(re.search(r"^pid (\d+)$", done.stdout, re.M).group(1))


def test_each_linked_kernel_is_named_over_its_code():
    done = run(PROGRAM, NEURON_PERF_MAP="1")
    lines = done.maps[pid_of(done)]
    assert lines, done.stdout
    linked = int(re.search(r"^linked (\d+)$", done.stdout, re.M).group(1))
    assert linked >= 3
    assert len(lines) == linked, lines
    for line in lines:
        match = LINE.match(line)
        assert match, line
        assert int(match.group(2), 16) > 0, line  # the entry's own size, from its object
    assert len({LINE.match(line).group(3) for line in lines}) == len(lines)
    reported = [row for row in done.stdout.splitlines() if row.startswith(("inside", "outside"))]
    assert len(reported) == len(lines)
    assert all(row.startswith("inside ") for row in reported), reported


# A program that first plants something at its own map's path (PLANT: `path` is the map).
PLANTED = "import os\npath = f'/tmp/perf-{os.getpid()}.map'\n{plant}\nplanted = True\n" + PROGRAM


def test_a_fifo_planted_at_the_path_is_refused_without_blocking():
    done = run(PLANTED.replace("{plant}", "os.mkfifo(path)"), NEURON_PERF_MAP="1")
    # A FIFO without a reader refuses a non-blocking open for writing (ENXIO).
    assert "NEURON_PERF_MAP: /tmp/perf-" in done.stderr and "not written" in done.stderr, \
        done.stderr
    assert done.stderr.count("NEURON_PERF_MAP") == 1, done.stderr


def test_a_hard_link_planted_at_the_path_is_not_written_through():
    with tempfile.TemporaryDirectory(prefix="neuron-perf-map-") as directory:
        victim = os.path.join(directory, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        done = run(PLANTED.replace("{plant}", f"os.link({victim!r}, path)"), NEURON_PERF_MAP="1")
        with open(victim) as f:
            assert f.read() == "precious\n"
        assert "(it has 2 names (a hard link))" in done.stderr, done.stderr


def test_a_map_an_earlier_process_of_the_same_pid_left_is_emptied_first():
    stale = "7f0000000000 100 neuron_kernel_of_an_earlier_process"
    done = run(PLANTED.replace("{plant}", f"open(path, 'w').write({stale + chr(10)!r})")
               .replace("planted = True", "planted = False"), NEURON_PERF_MAP="1")
    lines = done.maps[pid_of(done)]
    assert lines and stale not in lines, lines
    assert all(LINE.match(line) for line in lines)


def test_nothing_is_written_without_the_variable():
    done = run(PROGRAM)
    assert done.maps[pid_of(done)] is None
    assert "NEURON_PERF_MAP" not in done.stderr


def test_a_link_planted_at_the_path_is_not_followed():
    with tempfile.TemporaryDirectory(prefix="neuron-perf-map-") as directory:
        target = os.path.join(directory, "victim")
        open(target, "w").close()
        planted = ("import os\nos.symlink(%r, f'/tmp/perf-{os.getpid()}.map')\nplanted = True\n"
               % target) + PROGRAM
        done = run(planted, NEURON_PERF_MAP="1")
        pid = pid_of(done)
        assert os.path.getsize(target) == 0
        assert f"NEURON_PERF_MAP: /tmp/perf-{pid}.map not written" in done.stderr, done.stderr
        assert done.stderr.count("NEURON_PERF_MAP") == 1, done.stderr


FORKED = PROGRAM + r"""
import sys
child = os.fork()
if child == 0:
    z = (x * 3).exp()  # a kernel the parent never linked
    assert torch.allclose(z.cpu(), (torch.arange(64.) * 3).exp())
    print("child", os.getpid(), flush=True)
    os._exit(0)
_, status = os.waitpid(child, 0)
assert status == 0
"""


def test_a_forked_child_writes_the_map_of_its_own_pid():
    done = run(FORKED, NEURON_PERF_MAP="1")
    parent = done.maps[pid_of(done)]
    child = done.maps[int(re.search(r"^child (\d+)$", done.stdout, re.M).group(1))]
    assert parent and child, done.stdout
    assert all(LINE.match(line) for line in child)
    assert not set(child) & set(parent)

