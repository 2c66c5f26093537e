#!/usr/bin/env python3
"""Tiny click-log TFRecords for developing tf_peer.py (NOT the benchmark data).

The benchmark's data comes from `actorflow generate criteo` followed by
`actorflow convert csv`.  This script only writes a small stand-in with the
same tf.Example schema, using TensorFlow's own writer:

  label          int64  0/1, drawn from sigmoid(planted_logit)
  I1..I13        float  counts (missing written as 0, as the converter does)
  C1..C26        bytes  8 hex digits, missing = b""
  planted_logit  float  the planted model's logit

Files: OUT/train-0000i-of-0000N.tfrecord, OUT/test-00000-of-00001.tfrecord and
OUT/planted.json (numeric_mean / numeric_std of log1p(max(I, 0)), which is what
tf_peer.py standardizes with).

  build/venv/bin/python bench/seed_case/make_tiny.py --out /tmp/tiny \
      --train-rows 20000 --test-rows 5000 --shards 6
"""
import argparse
import json
import os
import sys

import numpy as np

N_NUM, N_CAT = 13, 26


def generate(rng, rows, model):
    """Rows from the planted model: returns dict of numpy columns."""
    # Numerics: log-normal counts, ~20% missing (written as 0).
    z = rng.normal(model["num_mu"], model["num_sigma"], size=(rows, N_NUM))
    ints = np.floor(np.expm1(np.maximum(z, 0.0)))
    missing = rng.random((rows, N_NUM)) < 0.2
    ints[missing] = 0.0
    t = np.log1p(np.maximum(ints, 0.0))
    tz = (t - model["t_mean"]) / model["t_std"]
    logit = model["bias"] + tz @ model["num_w"]
    # Categoricals: Zipf-like ids per column, some missing.
    cats = np.empty((rows, N_CAT), dtype=np.int64)
    cat_missing = rng.random((rows, N_CAT)) < model["cat_missing"]
    for j in range(N_CAT):
        v = model["vocab"][j]
        ids = np.minimum(rng.zipf(1.3, size=rows) - 1, v - 1)
        cats[:, j] = ids
        w = model["cat_w"][j][ids]
        w[cat_missing[:, j]] = model["cat_w_missing"][j]
        logit += w
    # One pairwise interaction, so an MLP beats a linear model a little.
    logit += 0.5 * np.tanh(model["cat_w"][0][cats[:, 0]] * 3.0) * tz[:, 0]
    p = 1.0 / (1.0 + np.exp(-logit))
    label = (rng.random(rows) < p).astype(np.int64)
    return ints.astype(np.float32), cats, cat_missing, logit.astype(np.float32), label


def token(model, j, i):
    return b"%08x" % int(model["tok"][j][i])


def write(path, cols, model):
    import tensorflow as tf

    ints, cats, cat_missing, logit, label = cols
    tmp = path + ".tmp"
    with tf.io.TFRecordWriter(tmp) as w:
        for r in range(len(label)):
            f = {"label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label[r]])),
                 "planted_logit": tf.train.Feature(float_list=tf.train.FloatList(value=[logit[r]]))}
            for k in range(N_NUM):
                f["I%d" % (k + 1)] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=[ints[r, k]]))
            for j in range(N_CAT):
                v = b"" if cat_missing[r, j] else token(model, j, cats[r, j])
                f["C%d" % (j + 1)] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[v]))
            w.write(tf.train.Example(features=tf.train.Features(feature=f))
                    .SerializeToString())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--train-rows", type=int, default=20000)
    ap.add_argument("--test-rows", type=int, default=5000)
    ap.add_argument("--shards", type=int, default=6, help="train shards")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    vocab = [int(v) for v in rng.integers(10, 20000, size=N_CAT)]
    model = {
        "num_mu": rng.uniform(0.0, 3.0, N_NUM),
        "num_sigma": rng.uniform(0.5, 2.0, N_NUM),
        "num_w": rng.normal(0.0, 0.3, N_NUM),
        "bias": -1.6,
        "vocab": vocab,
        "cat_w": [rng.normal(0.0, 0.6, v) for v in vocab],
        "cat_w_missing": rng.normal(0.0, 0.3, N_CAT),
        "cat_missing": rng.uniform(0.0, 0.3, N_CAT),
        "tok": [rng.integers(0, 2**32, size=v, dtype=np.uint64) for v in vocab],
        "t_mean": np.zeros(N_NUM), "t_std": np.ones(N_NUM),
    }
    # Statistics of log1p(max(I,0)) from a large sample of the same model.
    ints = generate(np.random.default_rng(a.seed + 100), 100000, model)[0]
    t = np.log1p(np.maximum(ints, 0.0))
    model["t_mean"], model["t_std"] = t.mean(0), t.std(0) + 1e-6
    with open(os.path.join(a.out, "planted.json"), "w") as f:
        json.dump({"numeric_mean": model["t_mean"].tolist(),
                   "numeric_std": model["t_std"].tolist(),
                   "numeric_transform": "log1p(max(x,0))",
                   "source": "make_tiny.py (development stand-in)"}, f)
    per = [a.train_rows // a.shards + (1 if i < a.train_rows % a.shards else 0)
           for i in range(a.shards)]
    for i, n in enumerate(per):
        write(os.path.join(a.out, "train-%05d-of-%05d.tfrecord" % (i, a.shards)),
              generate(rng, n, model), model)
    write(os.path.join(a.out, "test-00000-of-00001.tfrecord"),
          generate(rng, a.test_rows, model), model)
    print("wrote %d train rows in %d shards and %d test rows to %s"
          % (a.train_rows, a.shards, a.test_rows, a.out), file=sys.stderr)


if __name__ == "__main__":
    main()
