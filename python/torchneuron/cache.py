"""torchneuron-cache: inspect and manage the persistent compile cache.

    torchneuron-cache [--dir DIR] stats|list|verify|clear|repair
    torchneuron-cache [--dir DIR] prune --max-bytes N
    torchneuron-cache [--dir DIR] export FILE
    torchneuron-cache [--dir DIR] import [--trust] FILE
    torchneuron-cache [--dir DIR] [--remote URL] push|pull
    torchneuron-cache keygen FILE
    python -m torchneuron.cache ...           (the same)

DIR defaults to NEURON_CACHE_DIR, else ~/.cache/torchneuron; it must be a cache directory, an
empty directory or a new one, and pass the cache's trust checks (docs/persistent-cache.md).
`verify` checks every entry (checksum, MAC under this cache's key, layout) and exits 1 when any is
damaged or forged, or the database itself is. `import` takes only entries signed with this cache's
key; `--trust` re-signs other entries (their author can then run code in this account). URL (default
NEURON_CACHE_REMOTE) is the cluster's remote tier, redis://[:password@]host[:port][/db] or
file:///path, used under the key in NEURON_CACHE_KEY_FILE: `stats` surveys it too, `push` copies
the verified local entries it lacks to it (pre-warming a cluster from a build node), `pull` the
verified entries for this host it holds to the local cache. Every bad argument is a one-line error
with exit status 2.
"""
import argparse
import datetime
import os
import sys
import warnings

from torchneuron import _C

PROG = "torchneuron-cache"
INT64_MAX = 2**63 - 1
ARCHIVE_HEADER = b"NEFF-ARCHIVE 2\n"  # src/cache/cache_archive.h


class UsageError(Exception):
    """A bad argument: one line on stderr, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def byte_count(text):
    """A non-negative decimal integer that fits in int64 (no exponent, no sign)."""
    if not text.isascii() or not text.isdigit() or int(text) > INT64_MAX:
        raise argparse.ArgumentTypeError(
            f"not a byte count: {text!r} (a whole number from 0 to {INT64_MAX})")
    return int(text)


def checked_directory(path):
    """The --dir argument: an existing cache directory, an empty directory, or a new one."""
    if not path:
        raise UsageError("--dir is empty (name a cache directory)")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UsageError(f"--dir {path} is not a directory")
    if os.path.isdir(path):
        # The library's own rule (src/cache/cache_directory_tag.h: its CACHEDIR.TAG, or only
        # names the cache writes), asked before anything is opened.
        problem = _C.cache_directory_problem(os.path.realpath(path))
        if problem:
            raise UsageError(f"--dir {problem}")
    return path


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def entries_of(args):
    """The entries and the database's problem ("" when it reads)."""
    rows, problem = _C.cache_list(args.dir)
    if problem:
        print(f"{PROG}: the database in {args.dir} is damaged ({problem}); "
              f"`{PROG} repair` recovers what it can, `{PROG} clear` starts over", file=sys.stderr)
    return rows, problem


def command_stats(args):
    s = _C.cache_stats(args.dir)
    print(f"directory {args.dir}\nkey       {s['key_id']} ({s['key_source']})")
    if s["database_problem"]:
        print(f"{PROG}: the database is damaged ({s['database_problem']}); run `{PROG} repair`",
              file=sys.stderr)
        return 1
    print(f"entries   {s['entries']}\nbytes     {s['bytes']} ({human(s['bytes'])})")
    print(f"hits      {s['hits']}\nmisses    {s['misses']}\ncorrupt   {s['corrupt']}\nevicted   {s['evicted']}")
    print("(hits, misses, corrupt and evicted count this command's own reads; processes report "
          "theirs in torchneuron.metrics())")
    if not args.remote:
        return 0
    return print_remote_stats(args, s)


def print_remote_stats(args, local):
    """A line per tier: the memory tier is per process; the local tier as listed now; the remote
    tier read and verified entry by entry, with the usage counters its processes added."""
    rows, _ = _C.cache_list(args.dir)
    local_rejected = sum(1 for r in rows if r["problem"] or r["seal"] != "authentic")
    remote = _C.cache_remote_survey(args.remote)
    usage, usage_problem = _C.cache_remote_usage(args.remote)
    line = "{:8} {:>8} {:>12} {:>9} {:>9} {:>9} {:>9} {:>10}   {}"
    print()
    print(line.format("tier", "entries", "bytes", "verified", "rejected", "hits", "misses",
                      "published", ""))
    print(line.format("memory", *"-------", "per process: torchneuron.metrics()"))
    print(line.format("local", local["entries"], local["bytes"], len(rows) - local_rejected,
                      local_rejected, "-", "-", "-", args.dir))
    print(line.format("remote", remote["entries"], remote["bytes"], remote["authentic"],
                      remote["rejected"], usage.get("hits", 0), usage.get("misses", 0),
                      usage.get("published", 0), f"{remote['location']} (key {remote['key_id']})"))
    print("(the remote tier's hits, misses and published are the sums its processes added at "
          "their exit; verified and rejected count the entries as they are now)")
    problem = remote["problem"] or usage_problem
    if problem:
        print(f"{PROG}: the remote tier: {problem}", file=sys.stderr)
        return 1
    return 0


def command_push(args):
    return transfer(args, "push", _C.cache_push)


def command_pull(args):
    return transfer(args, "pull", _C.cache_pull)


def transfer(args, verb, function):
    if not args.remote:
        raise UsageError(f"{verb} needs the remote tier: pass --remote URL or set NEURON_CACHE_REMOTE")
    copied, present, rejected, other_hosts, failed, problem = function(args.dir, args.remote)
    where = f"to {args.remote}" if verb == "push" else f"from {args.remote}"
    print(f"{verb}: copied {copied} entries {where}, {present} were there already, "
          f"{rejected} rejected" + (f", {other_hosts} for other kinds of host left there"
                                    if verb == "pull" else "")
          + (f", {failed} not taken" if failed else ""))
    if problem:
        print(f"{PROG}: {verb} stopped: {problem}", file=sys.stderr)
        return 1
    return 1 if rejected or failed else 0


def command_list(args):
    rows, problem = entries_of(args)
    print(f"{'key':33} {'bytes':>9} {'kernels':>7}  {'program':24} {'key id':16} {'MAC':12} last use")
    for r in sorted(rows, key=lambda r: -r["last_use_unix_ms"]):
        used = datetime.datetime.fromtimestamp(r["last_use_unix_ms"] / 1000).isoformat(" ", "seconds") \
            if r["last_use_unix_ms"] else "-"
        flag = f"  DAMAGED: {r['problem']}" if r["problem"] else ""
        program = r["program"] or f"(format v{r['format_version']})"
        print(f"{r['key']:33} {r['bytes']:>9} {r['kernels']:>7}  {program:24} {r['key_id'] or '-':16} "
              f"{r['seal']:12} {used}{flag}")
    print(f"{len(rows)} entries")
    return 1 if problem else 0


def command_verify(args):
    rows, problem = entries_of(args)
    damaged = [r for r in rows if r["problem"]]
    foreign = [r for r in rows if r["seal"] in ("other key", "other format")]
    for r in damaged:
        print(f"damaged {r['key']}: {r['problem']}")
    print(f"verified {len(rows)} entries: {len(rows) - len(damaged) - len(foreign)} intact, "
          f"{len(damaged)} damaged, {len(foreign)} foreign (another key or format: never loaded here)")
    return 1 if damaged or problem else 0


def command_repair(args):
    problem = _C.cache_repair(args.dir)
    if problem:
        print(f"{PROG}: repair failed ({problem}); `{PROG} clear` starts over", file=sys.stderr)
        return 1
    rows, problem = entries_of(args)
    damaged = sum(1 for r in rows if r["problem"])
    lost = os.path.join(args.dir, "db", "lost")
    lost_files = len(os.listdir(lost)) if os.path.isdir(lost) else 0
    print(f"repaired: {len(rows)} entries recovered ({len(rows) - damaged} intact, {damaged} damaged)")
    if lost_files:
        print(f"RocksDB set aside {lost_files} files it could not use in {lost}")
    return 1 if damaged or problem else 0


def command_prune(args):
    removed = _C.cache_prune(args.dir, args.max_bytes)
    print(f"evicted {removed} least recently used entries")
    return 0


def command_clear(args):
    cleared, profiles, lock_files, kept_key, problem = _C.cache_clear(args.dir)
    if not cleared:
        print(f"{PROG}: could not clear {args.dir} ({problem})", file=sys.stderr)
        return 1
    print(f"cleared the database, {profiles} warm-start profiles and {lock_files} lock files")
    if kept_key:
        print(f"kept the cache's key {kept_key} (remove it yourself to retire the key; entries "
              "signed with it then stop loading)")
    return 0


def refuse_to_overwrite(path):
    """Export replaces FILE whole: only a missing file, an empty one or an earlier export. A key
    file (the cluster's `NEURON_CACHE_KEY_FILE`), any other file, a device (`/dev/null` as root),
    a FIFO or a link is refused rather than replaced."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isfile(path):
        raise UsageError(f"{path} exists and is not a regular file (a link, device or FIFO); "
                         "export to a new file")
    with open(path, "rb") as f:
        start = f.read(len(ARCHIVE_HEADER))
    if start and start != ARCHIVE_HEADER:
        raise UsageError(f"{path} exists and is not a {PROG} export, which would replace it; "
                         "export to a new file or remove it first")


def command_export(args):
    target = os.path.realpath(args.file)
    directory = os.path.realpath(args.dir)
    if target == directory or target.startswith(directory + os.sep):
        raise UsageError(f"{args.file} lies inside the cache directory {args.dir}; export elsewhere")
    refuse_to_overwrite(args.file)
    exported, skipped, problem = _C.cache_export(args.dir, args.file)
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 1
    note = f" ({skipped} not signed with this cache's key were left out)" if skipped else ""
    print(f"exported {exported} entries to {args.file}{note}")
    return 0


def command_import(args):
    if os.path.isdir(args.file):
        raise UsageError(f"{args.file} is a directory, not an export file")
    if not os.path.exists(args.file):
        raise UsageError(f"no such file: {args.file}")
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.file} is not a regular file (an export file is one)")
    if args.trust:
        print(f"{PROG}: warning: --trust signs the entries of {args.file} with this cache's key. "
              "They hold machine code: whoever wrote the file can run code in this account "
              f"(uid {os.geteuid()}) through every program that uses this cache.", file=sys.stderr)
    imported, resigned, damaged, untrusted, problem = _C.cache_import(args.dir, args.file, args.trust)
    if problem:
        print(f"{PROG}: cannot import: {problem}", file=sys.stderr)
        return 1
    note = f" ({resigned} re-signed)" if resigned else ""
    print(f"imported {imported} entries{note}, rejected {damaged} damaged, {untrusted} untrusted")
    if untrusted:
        print(f"{untrusted} entries are not signed with this cache's key (another key, or forged); "
              "share the key through NEURON_CACHE_KEY_FILE, or pass --trust if you trust the "
              "file's author with this account")
    return 1 if damaged or untrusted else 0


def command_keygen(args):
    if os.path.lexists(args.file):
        raise UsageError(f"{args.file} exists already (a key is never overwritten)")
    problem = _C.cache_keygen(args.file)
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 1
    print(f"wrote a new key to {args.file} (mode 0600); point NEURON_CACHE_KEY_FILE at it on every "
          "node that shares a cache")
    return 0


def parser():
    p = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="cache directory (default: NEURON_CACHE_DIR, else ~/.cache/torchneuron)")
    p.add_argument("--remote", metavar="URL",
                   help="the cluster's remote tier (default: NEURON_CACHE_REMOTE), redis://... or file:///...")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    sub.add_parser("stats", help="entries, bytes, the key id")
    sub.add_parser("list", help="key, size, kernels, program, key id, MAC, last use of each entry")
    sub.add_parser("verify", help="check every entry; exit 1 on damage")
    sub.add_parser("repair", help="rebuild a damaged database from what is readable (RocksDB RepairDB)")
    prune = sub.add_parser("prune", help="evict least recently used entries down to a size")
    prune.add_argument("--max-bytes", type=byte_count, required=True)
    sub.add_parser("clear", help="remove every entry, the profiles and stale locks (never the key)")
    export = sub.add_parser("export", help="write every entry, signed, to FILE")
    export.add_argument("file")
    imp = sub.add_parser("import", help="add the entries of FILE signed with this cache's key")
    imp.add_argument("--trust", action="store_true",
                     help="also re-sign entries signed otherwise (their author can run code here)")
    imp.add_argument("file")
    sub.add_parser("push", help="copy the verified local entries the remote tier lacks to it")
    sub.add_parser("pull", help="copy the verified entries for this host the remote tier holds here")
    keygen = sub.add_parser("keygen", help="write a new random key to FILE (mode 0600)")
    keygen.add_argument("file")
    return p


def print_warning(message, category, filename, lineno, file=None, line=None):
    print(f"{PROG}: warning: {str(message).splitlines()[0]}", file=sys.stderr)


def main(argv=None):
    _C.cache_warnings_to_stderr()
    with warnings.catch_warnings():
        warnings.showwarning = print_warning
        return run(argv)


def run(argv):
    try:
        args = parser().parse_args(argv)
        if args.command != "keygen":
            if args.dir is None:
                args.dir = _C.cache_default_directory()
                if not args.dir:
                    raise UsageError("HOME is unset and this user has no home directory: pass --dir")
            args.dir = checked_directory(args.dir)
        if args.remote is None:
            args.remote = os.environ.get("NEURON_CACHE_REMOTE", "")
        return globals()["command_" + args.command](args)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # the store refused the directory or the key
        text = str(error).splitlines()[0] if str(error) else "unknown error"
        print(f"{PROG}: error: {text.removeprefix('[cache] ')}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
