#!/usr/bin/env python3
"""tf.data peer of the ActorFlow input-pipeline benchmark.

Benchmark mode reads TFRecord shards of tf.Example records (features
`image`: the JPEG file's bytes, `label`: int64) through the usual tf.data
ImageNet training pipeline:

  TFRecordDataset(files, num_parallel_reads=AUTOTUNE)
    -> map(parse, decode_jpeg, random-resized-crop to 224x224, random flip,
           normalize with the ImageNet mean/std; num_parallel_calls=AUTOTUNE)
    -> batch(64, num_parallel_calls=AUTOTUNE) -> prefetch(AUTOTUNE)

with deterministic=False (records may come out of order, as a training
input allows) on the map, the batch and the dataset's options.
--decode-and-crop decodes only the sampled window with
tf.io.decode_and_crop_jpeg (TensorFlow's own ResNet input code does this)
instead of decoding the whole image and slicing it.

The random-resized crop is torchvision's RandomResizedCrop in TF terms:
tf.image.sample_distorted_bounding_box with area_range (0.08, 1.0),
aspect_ratio_range (3/4, 4/3), 10 attempts, falling back to the whole image,
then a bilinear resize to 224x224. Prints one JSON line:

  {"peer": "tf.data", "threads": N, "images_per_s": X, "images": M, "seconds": S}

Write mode makes those shards from make_dataset.py's image folder with TF's
own writer (labels: class folders in sorted order, as torchvision's
ImageFolder numbers them), so ActorFlow can read the identical files:

  python3 bench/input_pipeline/tfdata_peer.py --write-from-folder /tmp/af_bench_images \\
      --out /tmp/af_bench_tfr/train --shards 4
  python3 bench/input_pipeline/tfdata_peer.py --files '/tmp/af_bench_tfr/*.tfrecord' --threads 2

Needs TensorFlow: pip install tensorflow-cpu (for the python3 that pip uses).
"""

import argparse
import glob
import json
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep stdout/stderr to our own lines

try:
    import tensorflow as tf
except ImportError as e:
    print("tfdata_peer: cannot import tensorflow (%s); pip install tensorflow-cpu" % e, file=sys.stderr)
    sys.exit(2)

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
IMAGE_SIZE = 224

FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


# ---------------------------------------------------------------- write mode

def write_from_folder(folder, prefix, shards, seed):
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    items = []
    for label, cls in enumerate(classes):
        d = os.path.join(folder, cls)
        for name in sorted(os.listdir(d)):
            if name.lower().endswith((".jpg", ".jpeg")):
                items.append((os.path.join(d, name), label))
    if not items:
        print("tfdata_peer: no JPEG files under %s/<class>/" % folder, file=sys.stderr)
        return 2
    # Mix the classes across and within shards, the same way every time.
    random.Random(seed).shuffle(items)
    out_dir = os.path.dirname(prefix)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    paths = ["%s-%05d-of-%05d.tfrecord" % (prefix, s, shards) for s in range(shards)]
    counts = [0] * shards
    total = 0
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    try:
        for i, (path, label) in enumerate(items):
            with open(path, "rb") as f:
                data = f.read()
            example = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }))
            writers[i % shards].write(example.SerializeToString(deterministic=True))
            counts[i % shards] += 1
            total += len(data)
    finally:
        for w in writers:
            w.close()
    with open(prefix + "-labels.txt", "w") as f:
        for label, cls in enumerate(classes):
            f.write("%d %s\n" % (label, cls))
    for p, n in zip(paths, counts):
        print("tfdata_peer: wrote %s (%d records)" % (p, n))
    print("tfdata_peer: %d images, %.1f MB of JPEG, %d classes (%s-labels.txt)"
          % (len(items), total / 1e6, len(classes), prefix))
    return 0


# ------------------------------------------------------------ benchmark mode

def random_resized_crop(image_bytes, decode_and_crop):
    shape = tf.image.extract_jpeg_shape(image_bytes) if decode_and_crop else None
    if shape is None:
        image = tf.io.decode_jpeg(image_bytes, channels=3)
        shape = tf.shape(image)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
        min_object_covered=0.0,
        aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
        area_range=(0.08, 1.0),
        max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    if decode_and_crop:
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.io.decode_and_crop_jpeg(image_bytes, window, channels=3)
    else:
        image = tf.slice(image, begin, size)
    return tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE], method="bilinear")


def make_dataset(files, batch_size, threads, decode_and_crop, shuffle_buffer):
    mean = tf.constant(IMAGENET_MEAN, tf.float32)
    std = tf.constant(IMAGENET_STD, tf.float32)

    def preprocess(record):
        ex = tf.io.parse_single_example(record, FEATURES)
        image = random_resized_crop(ex["image"], decode_and_crop)  # float32, 0..255
        image = tf.image.random_flip_left_right(image)
        image = (image / 255.0 - mean) / std
        return image, ex["label"]

    # tf.data's guide ("Better performance with the tf.data API"): parallel
    # reads, parallel map and batch, prefetch, every degree AUTOTUNE, and
    # order not kept (deterministic=False), as a training input needs none.
    ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
    if shuffle_buffer > 0:
        ds = ds.shuffle(shuffle_buffer)
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.batch(batch_size, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = False
    options.autotune.enabled = True
    if threads > 0:
        # tf.data runs its map and reads on its own pool, sized to the
        # machine unless told: cap it too, so N means N.
        options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def benchmark(args):
    files = sorted(glob.glob(args.files))
    if not files:
        print("tfdata_peer: no file matches %s" % args.files, file=sys.stderr)
        return 2
    ds = make_dataset(files, args.batch_size, args.threads, args.decode_and_crop, args.shuffle_buffer)
    if args.limit > 0:
        ds = ds.take((args.limit + args.batch_size - 1) // args.batch_size)

    # Warm-up: builds the graph, starts the threads and lets AUTOTUNE settle
    # a little, outside the timing.
    for n, _ in enumerate(ds):
        if n + 1 >= args.warmup:
            break

    images = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch, labels in ds:
            images += int(batch.shape[0])
    seconds = time.perf_counter() - start

    print(json.dumps({
        "peer": "tf.data",
        "threads": args.threads,
        "decode_and_crop": args.decode_and_crop,
        "deterministic": False,
        "images_per_s": round(images / seconds, 1),
        "images": images,
        "seconds": round(seconds, 3),
    }), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description="tf.data peer of the input-pipeline benchmark")
    ap.add_argument("--files", help="glob of TFRecord shards, e.g. 'DIR/*.tfrecord' (quote it)")
    ap.add_argument("--threads", type=int, default=0,
                    help="inter- and intra-op threads, and tf.data's pool (0: TensorFlow's defaults)")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4, help="batches read before timing starts (default 4)")
    ap.add_argument("--limit", type=int, default=0, help="read only about the first N images per epoch (0: all)")
    ap.add_argument("--shuffle-buffer", type=int, default=0, help="shuffle records through a buffer of N (default off)")
    ap.add_argument("--decode-and-crop", action="store_true",
                    help="decode only the sampled window (tf.io.decode_and_crop_jpeg) instead of the whole JPEG")
    ap.add_argument("--write-from-folder", metavar="DIR", help="write TFRecord shards from DIR/<class>/*.jpg")
    ap.add_argument("--out", metavar="PREFIX", help="write mode: shards are PREFIX-0000i-of-0000n.tfrecord")
    ap.add_argument("--shards", type=int, default=4, help="write mode: number of shards (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="write mode: seed of the record order (default 0)")
    args = ap.parse_args()

    if args.write_from_folder:
        if not args.out or args.shards < 1:
            ap.error("--write-from-folder needs --out PREFIX and --shards >= 1")
        return write_from_folder(args.write_from_folder, args.out, args.shards, args.seed)
    if not args.files:
        ap.error("give --files GLOB (benchmark) or --write-from-folder DIR --out PREFIX (write)")
    if args.epochs < 1 or args.batch_size < 1 or args.threads < 0:
        ap.error("--epochs and --batch-size must be >= 1, --threads >= 0")
    if args.threads > 0:
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    return benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
