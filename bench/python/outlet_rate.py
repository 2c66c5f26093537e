#!/usr/bin/env python3
"""The Python side of bench/python/run.sh's per-batch overhead: batches per
second through actorflow's iterator on a topology, each batch turned into
a dict of arrays and dropped (outlet_rate.cpp is the C++ side).

    python outlet_rate.py TOPOLOGY [--outlet out] [--threads 2]
"""

import argparse
import json
import time

import actorflow


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topology")
    ap.add_argument("--outlet", default="out")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    actorflow.set_log_level("warn")
    start = time.perf_counter()
    n = 0
    with actorflow.Pipeline.from_file(args.topology).iterate(outlet=args.outlet, threads=args.threads) as it:
        for batch in it:
            n += 1
    seconds = time.perf_counter() - start
    print(json.dumps({"side": "python", "batches": n, "seconds": round(seconds, 4),
                      "batches_per_s": round(n / seconds, 1)}))


if __name__ == "__main__":
    main()
