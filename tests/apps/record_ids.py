#!/usr/bin/env python3
"""Checks the record ids that trainers or sinks listed (TrainerConfig.record_ids,
docs/training.md: one line "STEP EPOCH ID" per record) against the records
the job's input holds: which records, not how many.

  record_ids.py MODE --epochs E (--records N | --tfrecords GLOB) [options] FILE...

The input: --records N (ids 0..N-1, as ctr_source and idx_source number
them) or --tfrecords GLOB (every record of those TFRecord files, id
= file number in sorted order << 32 | record number, as tfrecord_source
numbers them; the files are read here, so the set does not come from the
engine). --skipped ID,ID,...: records the job must leave out (corrupt ones
skipped by policy): they must not appear, and are not expected.

MODE exactly-once: every record E times (--by-epoch: exactly once in each
epoch 0..E-1, by the EPOCH column), nothing else. MODE at-least-once: every
record at least E times, nothing unknown; the records that came more often
are listed (ranges, in reading order) and must fit what the docs explain:
  --dups-prefix-of F1,F2,...  they are the first D records of those files
                              read in that order (a lost reader's share of
                              the epoch it was lost in, as far as it got)
  --dups-whole-items K        they are whole items of K records of the
                              epoch's reading order (every file in order)
  --max-dups D                at most D records came more often
Every record comes at most E + 1 times. MODE at-most-once (a lost
consumer's records are dropped): no record twice in an epoch (by the EPOCH
column), nothing unknown; the records missing are listed (ranges, in
reading order, per epoch) and bounded by --max-missing M. Exit 0 when the ids fit, 1 (with
what is missing, extra or unknown, at most 10 of each) when not.
"""
import argparse
import collections
import glob
import struct
import sys


def tfrecord_counts(files):
    counts = []
    for path in files:
        n = 0
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            if pos + 12 > len(data):
                sys.exit(f"{path}: offset {pos}: truncated record header")
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 12 + length + 4
            if pos > len(data):
                sys.exit(f"{path}: truncated record")
            n += 1
        counts.append(n)
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["exactly-once", "at-least-once",
                                     "at-most-once"])
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--records", type=int)
    ap.add_argument("--tfrecords")
    ap.add_argument("--by-epoch", action="store_true")
    ap.add_argument("--dups-prefix-of")
    ap.add_argument("--dups-whole-items", type=int)
    ap.add_argument("--max-dups", type=int)
    ap.add_argument("--max-missing", type=int)
    ap.add_argument("--skipped")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()

    # The records in reading order (one epoch), and how to name them.
    if a.records is not None:
        order = list(range(a.records))
        name = lambda i: f"record {i}"
        per_file = None
    else:
        files = sorted(glob.glob(a.tfrecords))
        if not files:
            sys.exit(f"no file matches {a.tfrecords}")
        per_file = tfrecord_counts(files)
        order = [(f << 32) | r for f, n in enumerate(per_file) for r in range(n)]
        name = lambda i: f"file {i >> 32} record {i & 0xffffffff}"
    skipped = set(int(x) for x in a.skipped.split(",")) if a.skipped else set()
    if not skipped <= set(order):
        sys.exit(f"--skipped names ids that are not records of the input")
    known = set(order)
    order = [r for r in order if r not in skipped]

    counts = collections.Counter()
    pairs = collections.Counter()
    lines = 0
    for path in a.files:
        with open(path) as f:
            for k, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != 3:
                    sys.exit(f"{path}:{k}: not 'STEP EPOCH ID': {line!r}")
                step, epoch, rid = (int(x) for x in parts)
                counts[rid] += 1
                pairs[(epoch, rid)] += 1
                lines += 1

    problems = []

    def report(what, items, fmt):
        if items:
            problems.append(f"{len(items)} {what}:")
            for x in items[:10]:
                problems.append("  " + fmt(x))
            if len(items) > 10:
                problems.append(f"  ... and {len(items) - 10} more")

    unknown = sorted(r for r in counts if r not in known)
    report("unknown ids (not a record of the input)", unknown,
           lambda r: f"id {r} ({counts[r]} times)")
    came = sorted(r for r in counts if r in skipped)
    report("records that should have been skipped", came,
           lambda r: f"{name(r)}: {counts[r]} times")
    E = a.epochs
    if a.mode == "at-most-once":
        twice = sorted(p for p, c in pairs.items() if c > 1)
        report("records listed more than once in an epoch", twice,
               lambda p: f"epoch {p[0]}: {name(p[1])}: {pairs[p]} times")
        bad_epoch = sorted(p for p in pairs if not 0 <= p[0] < E)
        report("lines with an epoch outside [0, E)", bad_epoch,
               lambda p: f"epoch {p[0]}: {name(p[1])}")
        missing = [(e, r) for e in range(E) for r in order if pairs[(e, r)] == 0]
        ranges = []
        for e, r in missing:
            if ranges and ranges[-1][0] == e and ranges[-1][2] + 1 == r:
                ranges[-1][2] = r
            else:
                ranges.append([e, r, r])
        print(f"{len(missing)} records never came (at-most-once)"
              + (":" if missing else ""))
        for e, lo, hi in ranges[:10]:
            print(f"  epoch {e}: {name(lo)} to {name(hi)}: {hi - lo + 1} records")
        if len(ranges) > 10:
            print(f"  ... and {len(ranges) - 10} more ranges")
        if a.max_missing is not None and len(missing) > a.max_missing:
            problems.append(f"{len(missing)} records never came, at most "
                            f"{a.max_missing} may")
    elif a.mode == "exactly-once" and a.by_epoch:
        missing = [(e, r) for e in range(E) for r in order if pairs[(e, r)] == 0]
        twice = sorted(p for p, c in pairs.items() if c > 1)
        bad_epoch = sorted(p for p in pairs if not 0 <= p[0] < E)
        report("records never trained (epoch, record)", missing,
               lambda p: f"epoch {p[0]}: {name(p[1])}")
        report("records trained more than once in an epoch", twice,
               lambda p: f"epoch {p[0]}: {name(p[1])}: {pairs[p]} times")
        report("lines with an epoch outside [0, E)", bad_epoch,
               lambda p: f"epoch {p[0]}: {name(p[1])}")
        extra = sum(c - 1 for c in pairs.values() if c > 1)
        print(f"by id: {len(missing)} (epoch, record) pairs lost, {extra} "
              f"duplicated")
    else:
        missing = [r for r in order if counts[r] < E]
        report(f"records listed fewer than {E} times", missing,
               lambda r: f"{name(r)}: {counts[r]} times")
        limit = E if a.mode == "exactly-once" else E + 1
        over = [r for r in order if counts[r] > limit]
        report(f"records listed more than {limit} times", over,
               lambda r: f"{name(r)}: {counts[r]} times")

    # Records that came more often than E, in reading order, as ranges.
    dups = [r for r in order if counts[r] > E]
    if a.mode == "at-least-once":
        ranges = []
        for r in dups:
            if ranges and ranges[-1][1] + 1 == r:
                ranges[-1][1] = r
            else:
                ranges.append([r, r])
        print(f"{len(dups)} records came {E + 1} times (at-least-once)"
              + (":" if dups else ""))
        for lo, hi in ranges[:10]:
            print(f"  {name(lo)} to {name(hi)}: {hi - lo + 1} records")
        if len(ranges) > 10:
            print(f"  ... and {len(ranges) - 10} more ranges")
        if a.max_dups is not None and len(dups) > a.max_dups:
            problems.append(f"{len(dups)} records came twice, at most "
                            f"{a.max_dups} may")
        if a.dups_prefix_of is not None and per_file is not None:
            share = [int(x) for x in a.dups_prefix_of.split(",")]
            seq = [(f << 32) | r for f in share for r in range(per_file[f])]
            if set(dups) != set(seq[:len(dups)]):
                problems.append(
                    "the records that came twice are not the first "
                    f"{len(dups)} records of files {a.dups_prefix_of} (the "
                    "lost reader's share, in the order it reads it)")
        if a.dups_whole_items:
            k = a.dups_whole_items
            pos = {r: i for i, r in enumerate(order)}
            items = collections.Counter(pos[r] // k for r in dups)
            partial = sorted(i for i, c in items.items()
                             if c != min(k, len(order) - i * k))
            report(f"items of {k} records that came twice only in part",
                   partial, lambda i: f"item {i}: {items[i]} of its records")
            print(f"  ({len(items)} whole items of {k} records)")
    elif dups and not problems:
        problems.append("records came more than once")

    if problems:
        print(f"record ids: {lines} lines in {len(a.files)} files: NOT as "
              f"promised ({a.mode})")
        print("\n".join(problems))
        return 1
    how = {"exactly-once": "exactly", "at-least-once": "at least",
           "at-most-once": "at most"}[a.mode]
    per = "once in each of" if a.by_epoch or a.mode == "at-most-once" \
        else "once per epoch,"
    print(f"record ids: {lines} lines in {len(a.files)} files: each of the "
          f"{len(order)} records {how} {per} {E} epochs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
