"""The compile cache's trust boundary, end to end: a forged entry (the real header and key
material of `x + y`'s kernel, object code that subtracts, a valid checksum) is never mapped,
whether planted in the store, imported, or sitting in a directory the cache refuses; keys and
directories are checked; every CLI error is one line. "Never mapped" is shown by the result: the
planted code would subtract, and the control test shows it does once it is signed with the key."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from cache_program import copy_cache, run_program
from torchneuron import cache as cache_cli

NOBODY = 65534
FORGER = os.path.join(os.environ.get("NEURON_BUILD_DIR", "build"), "tests", "neuron_cache_forger")

ADD = r"""
import json, torch, torchneuron
x = torch.arange(16.0)
y = torch.full((16,), 100.0)
got = (x.to(torchneuron.device()) + y.to(torchneuron.device())).cpu()
m = torchneuron.metrics()
print(json.dumps({"correct": torch.equal(got, x + y), "subtracted": torch.equal(got, x - y),
                  "compiles": m["compiles"], "rejected": m["persistent_rejected"],
                  "hits": m["persistent_hits"]}))
"""


@pytest.fixture
def root():
    path = tempfile.mkdtemp(prefix="neuron-trust-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def add(cache_dir, **env):
    """Runs x + y on the device with the cache in `cache_dir`: (result dict, [cache] warnings)."""
    done = run_program(dict({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always",
                             "NEURON_WARM_START": "0"}, **env), program=ADD)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result, [line for line in done.stderr.splitlines() if "[cache]" in line]


@pytest.fixture(scope="module")
def templates():
    """Cache directories `x + y` ran in once, copied by the tests that need its kernel stored
    (copying costs no interpreter): "own" under its per-user key (and with the run's warm-start
    profile), "cluster" under the key file "key"."""
    path = tempfile.mkdtemp(prefix="neuron-trust-templates-")
    key = os.path.join(path, "cluster.key")
    assert cache_cli.main(["keygen", key]) == 0
    own, cluster = os.path.join(path, "own"), os.path.join(path, "cluster")
    for directory, env in ((own, {"NEURON_WARM_START": "1"}),
                           (cluster, {"NEURON_CACHE_KEY_FILE": key})):
        result, warned = add(directory, **env)
        assert result["correct"] and result["compiles"] == 1 and warned == []
    yield {"own": own, "cluster": cluster, "key": key}
    shutil.rmtree(path, ignore_errors=True)


def forge(cache_dir, *args, env=None):
    done = subprocess.run([FORGER, cache_dir, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))
    assert done.returncode == 0 and int(done.stdout) >= 1, done.stdout + done.stderr
    return int(done.stdout)


def key_file(cli, root, name="cluster.key"):
    path = os.path.join(root, name)
    done = cli("keygen", path)
    assert done.returncode == 0, done.stderr
    return path


def test_forged_entry_planted_in_the_store_is_never_mapped(root, cli, templates):
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    forge(cache, "plant")
    assert "FORGED" in cli("--dir", cache, "list").stdout
    assert cli("--dir", cache, "verify").returncode == 1
    attacked, warned = add(cache)
    assert attacked["correct"] and not attacked["subtracted"]
    assert attacked["rejected"] == 1 and attacked["hits"] == 0 and attacked["compiles"] == 1
    assert len(warned) == 1 and "failed authentication" in warned[0], warned
    healed, warned = add(cache)  # the forged entry was overwritten by the compile
    assert healed["correct"] and healed["compiles"] == 0 and warned == []


def test_control_the_same_forgery_signed_with_the_key_would_run(root, templates):
    """What keeps the planted code out above is the MAC: signed, the same bytes are mapped."""
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    forge(cache, "plant-signed")
    attacked, _ = add(cache)
    assert attacked["subtracted"] and attacked["hits"] == 1


def test_forged_export_is_not_imported(root, cli, templates):
    key = templates["key"]  # both caches share a cluster key: the forgery carries its key id
    source = copy_cache(templates["cluster"], os.path.join(root, "source"))
    target = os.path.join(root, "target")
    archive = os.path.join(root, "forged.export")
    forge(source, "export", archive, env={"NEURON_CACHE_KEY_FILE": key})
    done = cli("--dir", target, "import", archive, env={"NEURON_CACHE_KEY_FILE": key})
    assert done.returncode == 1 and "imported 0 entries, rejected 0 damaged, 1 untrusted" in done.stdout
    result, warned = add(target, NEURON_CACHE_KEY_FILE=key)
    assert result["correct"] and result["compiles"] == 1 and warned == []


def test_an_authentic_entry_copied_under_another_key_is_misfiled_never_loaded_nor_imported(
        root, cli, templates):
    """A MAC covers an entry's bytes, not the key it is filed under: anyone who can write the
    directory (or hand over an export) can file a genuine entry under another key. Loading
    refuses it (its compile inputs hash to its own key); `list`/`verify` name it and `import`
    rejects it as damaged."""
    key = templates["key"]
    cache = copy_cache(templates["cluster"], os.path.join(root, "cache"))
    assert forge(cache, "misfile", env={"NEURON_CACHE_KEY_FILE": key}) == 1
    listed = cli("--dir", cache, "list", env={"NEURON_CACHE_KEY_FILE": key})
    assert listed.stdout.count("DAMAGED: filed under ") == 1, listed.stdout
    assert "never loaded" in listed.stdout, listed.stdout
    verified = cli("--dir", cache, "verify", env={"NEURON_CACHE_KEY_FILE": key})
    assert verified.returncode == 1 and "1 intact, 1 damaged" in verified.stdout, verified.stdout
    result, warned = add(cache, NEURON_CACHE_KEY_FILE=key)  # the genuine entry still serves
    assert result["correct"] and result["compiles"] == 0 and warned == []

    archive = os.path.join(root, "misfiled.export")
    source = copy_cache(templates["cluster"], os.path.join(root, "source"))
    assert forge(source, "export-misfiled", archive, env={"NEURON_CACHE_KEY_FILE": key}) == 1
    target = os.path.join(root, "target")
    for trust in ((), ("--trust",)):
        done = cli("--dir", target, "import", *trust, archive, env={"NEURON_CACHE_KEY_FILE": key})
        assert done.returncode == 1, done.stdout + done.stderr
        assert "imported 0 entries, rejected 1 damaged, 0 untrusted" in done.stdout, done.stdout
    assert "0 entries" in cli("--dir", target, "list", env={"NEURON_CACHE_KEY_FILE": key}).stdout


def test_genuine_export_imports_under_a_shared_key_and_foreign_ones_need_trust(root, cli,
                                                                               templates):
    key = templates["key"]
    source = copy_cache(templates["cluster"], os.path.join(root, "source"))
    archive = os.path.join(root, "genuine.export")
    assert "exported 1 entries" in cli("--dir", source, "export", archive,
                                       env={"NEURON_CACHE_KEY_FILE": key}).stdout
    shared = os.path.join(root, "shared")
    done = cli("--dir", shared, "import", archive, env={"NEURON_CACHE_KEY_FILE": key})
    assert done.returncode == 0 and "imported 1 entries" in done.stdout, done.stdout + done.stderr
    assert add(shared, NEURON_CACHE_KEY_FILE=key)[0]["compiles"] == 0
    # Another cache, with its own per-user key: refused, unless trusted, with a warning.
    own = os.path.join(root, "own")
    refused = cli("--dir", own, "import", archive)
    assert refused.returncode == 1 and "1 untrusted" in refused.stdout
    trusted = cli("--dir", own, "import", "--trust", archive)
    assert trusted.returncode == 0 and "(1 re-signed)" in trusted.stdout
    assert "can run code in this account" in trusted.stderr
    assert add(own)[0]["compiles"] == 0


@pytest.mark.parametrize("unsafe", ["world-writable", "group-writable", "foreign-owned"])
def test_cache_directory_linked_to_an_unsafe_place_is_refused(root, unsafe, cli, templates):
    target = copy_cache(templates["own"], os.path.join(root, "target"))
    forge(target, "plant")  # what an attacker left there
    if unsafe == "foreign-owned":
        os.chown(target, NOBODY, NOBODY)
    else:
        os.chmod(target, 0o777 if unsafe == "world-writable" else 0o775)
    link = os.path.join(root, "link")
    os.symlink(target, link)
    before = sorted(os.listdir(target))
    result, warned = add(link)
    assert result["correct"] and result["compiles"] == 1 and result["rejected"] == 0
    assert len(warned) == 1 and "persistent compile cache is off" in warned[0], warned
    assert f"resolves to {target}" in warned[0]
    expected = {"world-writable": "writable by others (mode 0777)",
                "group-writable": "writable by its group (mode 0775)",
                "foreign-owned": "owned by uid 65534"}[unsafe]
    assert expected in warned[0], warned
    assert sorted(os.listdir(target)) == before  # the tier is off: nothing read or written
    assert cli("--dir", link, "list").returncode == 2


def test_key_file_readable_by_others_is_refused(root, cli):
    key = key_file(cli, root)
    os.chmod(key, 0o644)
    cache = os.path.join(root, "cache")
    result, warned = add(cache, NEURON_CACHE_KEY_FILE=key)
    assert result["correct"] and result["compiles"] == 1
    assert len(warned) == 1 and f"{key} has mode 0644" in warned[0], warned
    assert not os.path.exists(os.path.join(cache, "db", "CURRENT"))  # nothing stored
    done = cli("--dir", cache, "stats", env={"NEURON_CACHE_KEY_FILE": key})
    assert done.returncode == 2 and "has mode 0644" in done.stderr


def test_changed_key_is_a_miss_not_a_forgery(root, cli, templates):
    # The kernel stored under the first key (the template's), then the key file changes.
    cache = copy_cache(templates["cluster"], os.path.join(root, "cache"))
    second = key_file(cli, root, "second.key")
    result, warned = add(cache, NEURON_CACHE_KEY_FILE=second)
    assert result["correct"] and result["compiles"] == 1 and result["rejected"] == 0
    assert warned == []
    assert add(cache, NEURON_CACHE_KEY_FILE=second)[0]["compiles"] == 0


def test_cli_errors_are_one_line_with_exit_status_2(root, cli, templates):
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    stray = os.path.join(root, "stray")
    os.mkdir(stray)
    open(os.path.join(stray, "notes.txt"), "w").close()
    a_file = os.path.join(root, "a-file")
    open(a_file, "w").close()
    existing_key = key_file(cli, root)
    cases = {
        ("--dir", cache, "prune", "--max-bytes", "1e23"): "not a byte count: '1e23'",
        ("--dir", cache, "prune", "--max-bytes", "-5"): "not a byte count: '-5'",
        ("--dir", cache, "prune", "--max-bytes", str(2**63)): "not a byte count",
        ("--dir", cache, "import", os.path.join(root, "missing")): "no such file",
        ("--dir", cache, "import", stray): "is a directory, not an export file",
        ("--dir", cache, "import", "/dev/null"): "is not a regular file",
        ("--dir", "", "stats"): "--dir is empty",
        ("--dir", a_file, "stats"): "is not a directory",
        ("--dir", stray, "clear"): "neither a torchneuron cache nor empty",
        ("--dir", cache, "export", os.path.join(cache, "db", "CURRENT")): "inside the cache directory",
        ("--dir", cache, "export", cache): "inside the cache directory",
        ("keygen", existing_key): "exists already",
        ("--dir", cache, "frobnicate"): "invalid choice",
    }
    for args, message in cases.items():
        done = cli(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert os.listdir(stray) == ["notes.txt"]
    assert cli("--dir", cache, "verify").returncode == 0  # the export attempts left it intact
    # The same from the command line: the exit status, one line, no traceback.
    for args in (("--dir", cache, "prune", "--max-bytes", "1e23"), ("--dir", "", "stats")):
        done = subprocess.run([sys.executable, "-m", "torchneuron.cache", *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("torchneuron-cache: error: ")


def test_import_of_a_crafted_file_is_a_clean_error(root, cli):
    cache = os.path.join(root, "cache")
    crafted = os.path.join(root, "crafted.export")
    with open(crafted, "wb") as f:
        f.write(b"NEFF-ARCHIVE 2\n" + (32).to_bytes(8, "little") + b"0" * 32
                + (2**31).to_bytes(8, "little") + b"x" * 16)
    done = cli("--dir", cache, "import", crafted)
    assert done.returncode == 1 and "claims 2147483648 bytes, but 16 remain" in done.stderr
    with open(crafted, "wb") as f:
        f.write(b"NEFF-ARCHIVE 2\n" + (32).to_bytes(8, "little")
                + b"\x1b[2J/../../etc/passwd".ljust(32, b".") + (8).to_bytes(8, "little") + b"v" * 8)
    done = cli("--dir", cache, "import", crafted)
    assert done.returncode == 1 and "not 32 lowercase hex digits" in done.stderr
    with open(crafted, "wb") as f:
        f.write(b"garbage")
    done = cli("--dir", cache, "import", crafted)
    assert done.returncode == 1 and "not a torchneuron-cache export" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("damage", ["CURRENT", "table file"])
def test_damaged_database_is_reported_and_repaired(root, damage, cli, templates):
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    db = os.path.join(cache, "db")
    if damage == "CURRENT":
        with open(os.path.join(db, "CURRENT"), "w") as f:
            f.write("garbage\n")
    else:
        [table] = [name for name in os.listdir(db) if name.endswith(".sst")]
        with open(os.path.join(db, table), "r+b") as f:
            f.seek(64)
            f.write(b"\xff" * 64)
    # A program runs correctly, recompiling, and is told once (a damaged table read as a miss
    # had recompiled without a word).
    result, warned = add(cache)
    assert result["correct"] and result["compiles"] == 1 and result["hits"] == 0, result
    assert len(warned) == 1 and "repair" in warned[0], warned
    for command in ("verify", "list", "stats"):
        done = cli("--dir", cache, command)
        assert done.returncode == 1 and "damaged" in done.stderr, (command, done.stdout, done.stderr)
    repaired = cli("--dir", cache, "repair")
    assert repaired.returncode == 0 and "repaired:" in repaired.stdout, repaired.stdout + repaired.stderr
    assert cli("--dir", cache, "verify").returncode == 0


def test_clear_removes_only_what_the_cache_wrote_and_keeps_the_key(root, cli, templates):
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))  # with a warm-start profile
    mine = os.path.join(cache, "profiles", "my-notes.txt")
    with open(mine, "w") as f:
        f.write("keep me")
    done = cli("--dir", cache, "clear")
    assert done.returncode == 0 and "kept the cache's key" in done.stdout
    assert "1 warm-start profiles" in done.stdout
    assert os.listdir(os.path.join(cache, "profiles")) == ["my-notes.txt"]
    assert os.path.exists(mine) and os.path.exists(os.path.join(cache, "mac.key"))
    assert not os.path.exists(os.path.join(cache, "db", "CURRENT"))


def test_a_directory_that_is_not_a_cache_is_never_used_or_cleared(root, cli):
    # A project with a `db` folder, and another program's database alone in a directory: the
    # cache opened <dir>/db as its RocksDB (writing its kernels into the other database) and
    # `clear` deleted the files there that looked like RocksDB's.
    project = os.path.join(root, "project")
    other_program = os.path.join(root, "other-program")
    for directory in (project, other_program):
        os.makedirs(os.path.join(directory, "db"), mode=0o700)
        os.chmod(directory, 0o700)
        for name in ("CURRENT", "LOG", "MANIFEST-000001", "000002.sst"):
            with open(os.path.join(directory, "db", name), "w") as f:
                f.write("their data")
    with open(os.path.join(project, "app.py"), "w") as f:
        f.write("print('hi')")
    before = {d: sorted(os.listdir(os.path.join(d, "db"))) + sorted(os.listdir(d))
              for d in (project, other_program)}
    for directory, holds in ((project, "app.py"), (other_program, "db")):
        result, warned = add(directory)
        assert result["correct"] and result["hits"] == 0
        assert len(warned) == 1 and "neither a torchneuron cache nor empty" in warned[0]
        assert f"(it holds {holds})" in warned[0]
        for command in ("clear", "verify", "stats"):
            done = cli("--dir", directory, command)
            assert done.returncode == 2 and "neither a torchneuron cache nor empty" in done.stderr
    assert before == {d: sorted(os.listdir(os.path.join(d, "db"))) + sorted(os.listdir(d))
                      for d in (project, other_program)}
    # A new or empty directory becomes a cache and is tagged (backup tools skip it); a cache
    # made before the tag (its names only) is tagged at its next use.
    fresh = os.path.join(root, "fresh")
    result, warned = add(fresh)
    assert result["correct"] and warned == []
    with open(os.path.join(fresh, "CACHEDIR.TAG")) as f:
        assert f.readline().strip() == "Signature: 8a477f597d28d172789f06886806bc55"
    os.remove(os.path.join(fresh, "CACHEDIR.TAG"))
    result, warned = add(fresh)
    assert result["correct"] and result["hits"] == 1 and warned == []
    assert os.path.exists(os.path.join(fresh, "CACHEDIR.TAG"))


def test_export_replaces_only_a_missing_empty_or_exported_file(root, cli, templates):
    # export renamed its file over whatever FILE was: the cluster's key file (every entry then
    # unloadable), another file, a device node, a FIFO or a link.
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    key = key_file(cli, root)
    with open(key) as f:
        key_text = f.read()
    notes = os.path.join(root, "notes.txt")
    with open(notes, "w") as f:
        f.write("mine")
    fifo, link = os.path.join(root, "fifo"), os.path.join(root, "link")
    os.mkfifo(fifo)
    os.symlink(notes, link)
    for target in (key, notes, fifo, link):
        done = cli("--dir", cache, "export", target)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    with open(key) as f:
        assert f.read() == key_text
    assert open(notes).read() == "mine" and os.path.islink(link)
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    exported = os.path.join(root, "entries.neff")
    for _ in range(2):  # a new file, then the earlier export replaced
        done = cli("--dir", cache, "export", exported)
        assert done.returncode == 0 and "exported 1 entries" in done.stdout, done.stderr
    open(notes, "w").close()  # an empty file may be replaced too
    assert cli("--dir", cache, "export", notes).returncode == 0


def test_a_fifo_as_the_key_or_in_the_database_is_refused_not_waited_on(root, cli, templates):
    # Opening a FIFO blocks until a writer comes: one as NEURON_CACHE_KEY_FILE, as mac.key or as
    # a database file hung the import, every device op and every CLI command.
    keys = os.path.join(root, "keys")
    os.makedirs(keys, mode=0o700)
    fifo_key = os.path.join(keys, "cluster.key")
    os.mkfifo(fifo_key, 0o600)
    result, warned = add(os.path.join(root, "a"), NEURON_CACHE_KEY_FILE=fifo_key)
    assert result["correct"] and any("not a regular file" in w for w in warned), warned
    own_fifo = os.path.join(root, "b")
    os.makedirs(own_fifo, mode=0o700)
    os.mkfifo(os.path.join(own_fifo, "mac.key"), 0o600)
    result, warned = add(own_fifo)
    assert result["correct"] and any("not a regular file" in w for w in warned), warned
    assert cli("--dir", own_fifo, "stats").returncode != 0
    for name in ("CURRENT", "IDENTITY", "MANIFEST-000005"):
        cache = copy_cache(templates["own"], os.path.join(root, "with-fifo-" + name))
        path = os.path.join(cache, "db", name)
        if os.path.exists(path):
            os.remove(path)
        os.mkfifo(path, 0o600)
        result, warned = add(cache)
        assert result["correct"] and result["hits"] == 0
        assert any(f"{path} is not a regular file" in w for w in warned), warned
        for command in ("verify", "stats", "repair"):
            done = cli("--dir", cache, command)
            assert done.returncode == 1 and "not a regular file" in done.stderr, (command, done)


def test_a_stopped_holder_of_the_store_lock_costs_one_bounded_wait(root, templates):
    # A process stopped while it held store.lock (Ctrl-Z, a debugger) blocked every other process
    # of the cache directory at its first device op, forever: a blocking flock() with no deadline.
    cache = copy_cache(templates["own"], os.path.join(root, "cache"))
    # `sleep` inherits flock's descriptor, so the lock goes with the whole process group.
    holder = subprocess.Popen(["flock", "-x", os.path.join(cache, "store.lock"), "sleep", "300"],
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["flock", "-n", "-s", os.path.join(cache, "store.lock"), "true"]
                             ).returncode == 0:
            assert time.monotonic() < deadline, "flock never took the lock"
            time.sleep(0.05)
        result, warned = add(cache)  # run_program's own timeout bounds a hang
        assert result["correct"]
        assert any("store.lock for over 10 s" in w for w in warned), warned
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    result, warned = add(cache)
    assert result["correct"] and result["hits"] == 1 and warned == []
