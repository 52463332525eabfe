"""torchneuron-cache: inspect and manage the persistent compile cache.

    torchneuron-cache [--dir DIR] stats|list|verify|clear
    torchneuron-cache [--dir DIR] prune --max-bytes N
    torchneuron-cache [--dir DIR] export FILE | import FILE
    python -m torchneuron.cache ...           (the same)

DIR defaults to NEURON_CACHE_DIR, else ~/.cache/torchneuron. `verify` checks every entry's
container (magic, bounds, XXH3-128 checksum) and exits 1 when any is damaged; `import` verifies
every entry it reads and skips damaged ones.
"""
import argparse
import datetime
import os
import sys

from torchneuron import _C


def default_directory():
    env = os.environ.get("NEURON_CACHE_DIR")
    if env:
        return env
    return os.path.join(os.path.expanduser("~"), ".cache", "torchneuron")


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def command_stats(args):
    s = _C.cache_stats(args.dir)
    print(f"directory {args.dir}\nentries   {s['entries']}\nbytes     {s['bytes']} ({human(s['bytes'])})")
    print(f"hits      {s['hits']}\nmisses    {s['misses']}\ncorrupt   {s['corrupt']}\nevicted   {s['evicted']}")
    print("(hits, misses, corrupt and evicted count this command's own reads; processes report "
          "theirs in torchneuron.metrics())")
    return 0


def command_list(args):
    rows = _C.cache_list(args.dir)
    print(f"{'key':34} {'bytes':>9} {'kernels':>7}  last use")
    for r in sorted(rows, key=lambda r: -r["last_use_unix_ms"]):
        used = datetime.datetime.fromtimestamp(r["last_use_unix_ms"] / 1000).isoformat(" ", "seconds") \
            if r["last_use_unix_ms"] else "-"
        problem = f"  DAMAGED: {r['problem']}" if r["problem"] else ""
        print(f"{r['key']:34} {r['bytes']:>9} {r['kernels']:>7}  {used}{problem}")
    print(f"{len(rows)} entries")
    return 0


def command_verify(args):
    rows = _C.cache_list(args.dir)
    damaged = [r for r in rows if r["problem"]]
    for r in damaged:
        print(f"damaged {r['key']}: {r['problem']}")
    print(f"verified {len(rows)} entries: {len(rows) - len(damaged)} intact, {len(damaged)} damaged")
    return 1 if damaged else 0


def command_prune(args):
    if args.max_bytes < 0:
        print(f"torchneuron-cache: --max-bytes must be >= 0, got {args.max_bytes}", file=sys.stderr)
        return 2
    removed = _C.cache_prune(args.dir, args.max_bytes)
    print(f"evicted {removed} least recently used entries")
    return 0


def command_clear(args):
    ok = _C.cache_clear(args.dir)
    print("cleared" if ok else "could not clear the cache (see the warning above)")
    return 0 if ok else 1


def command_export(args):
    count = _C.cache_export(args.dir, args.file)
    if count < 0:
        print(f"torchneuron-cache: cannot write {args.file}", file=sys.stderr)
        return 1
    print(f"exported {count} entries to {args.file}")
    return 0


def command_import(args):
    if not os.path.isfile(args.file):
        print(f"torchneuron-cache: no such file: {args.file}", file=sys.stderr)
        return 2
    imported, rejected = _C.cache_import(args.dir, args.file)
    if imported < 0:
        print(f"torchneuron-cache: cannot import {args.file}", file=sys.stderr)
        return 1
    print(f"imported {imported} entries, rejected {rejected} damaged")
    return 1 if rejected else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="torchneuron-cache", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=default_directory(), help="cache directory")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("stats", help="entries, bytes, hits, misses, corrupt, evicted")
    sub.add_parser("list", help="key, size, kernels, last use of each entry")
    sub.add_parser("verify", help="check every entry; exit 1 on damage")
    prune = sub.add_parser("prune", help="evict least recently used entries down to a size")
    prune.add_argument("--max-bytes", type=int, required=True)
    sub.add_parser("clear", help="remove every entry")
    export = sub.add_parser("export", help="write every entry to FILE")
    export.add_argument("file")
    imp = sub.add_parser("import", help="add the entries of FILE (verified)")
    imp.add_argument("file")
    args = parser.parse_args(argv)
    return globals()["command_" + args.command](args)


if __name__ == "__main__":
    sys.exit(main())
