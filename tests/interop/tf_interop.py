#!/usr/bin/env python3
"""TFRecord / tf.Example interoperability tests between ActorFlow and TensorFlow.

  python3 tests/interop/tf_interop.py --actorflow BUILD/bin/actorflow --case NAME [...]

Exit status 0: passed (or skipped: prints "SKIP: <reason>" when tensorflow
cannot be imported; where CI is set that is a failure instead, exit 1);
1: failed, with one line per mismatch; 2: usage error.

Cases:
  read_ours        --file F [--file F2 ...] [--compression auto|none|gzip]:
                   each F was written by `actorflow convert` (or a job).
                   TensorFlow reads it (TFRecordDataset, which checks every
                   CRC, and tf.io.parse_single_example) and every record's
                   features must equal what `actorflow inspect F --json
                   --show all` prints. Every file is checked (one import
                   of TensorFlow for all); any failure fails the case.
  write_plain      TensorFlow writes ~50 tf.Example records (tf.io.TFRecordWriter,
                   no compression): bytes_list (empty lists, empty and binary
                   values, one of 100 kB), float_list (NaN, +-inf, -0.0,
                   denormals, float32 extremes, a list of 10,000), int64_list
                   (negatives, 2**62, int64 extremes, a list of 5,000),
                   records without features, odd feature names. ActorFlow's
                   inspect output must equal what TensorFlow reads back.
  write_gzip       the same records, written with options 'GZIP'; inspect gets
                   --compression gzip.
  write_encodings  records whose wire form TensorFlow's Python API never
                   produces but TensorFlow parses (and so must ActorFlow):
                   unpacked float/int64 lists, empty packed lists, unknown
                   fields in Example, a repeated feature name (the last one
                   wins, whatever its kind), a `features` field given twice
                   (the maps merge), a map entry with its key after its
                   value, an empty feature name, over-long varints.
  corrupt          a flipped data byte, a bad length CRC, a bad data CRC,
                   a file cut inside its last record: TensorFlow refuses each,
                   and `actorflow inspect` must exit non-zero on each.
  hash_bucket      TensorFlow writes 20,000 strings (random bytes, NUL
                   included, of every length 0..300, and UTF-8 words) to a
                   TFRecord; `actorflow run` hashes them with a hash_bucket
                   stage (hash: "fingerprint64") into 1000, 7 and 2**62
                   buckets and writes the ids with tfrecord_sink; every id
                   must equal tf.strings.to_hash_bucket_fast's and
                   tf.keras.layers.Hashing's for the same string.

`actorflow inspect F --json --show all [--compression gzip]` prints one JSON
object per record on stdout:
  {"index": 0, "offset": 0, "features": {"name": {"float_list": [1.5, "nan"]}, ...}}
offset: the record's byte offset in the uncompressed file; lists are
"bytes_list" (base64 strings), "float_list" (numbers that round-trip float32;
"nan", "inf", "-inf" as strings) or "int64_list" (JSON integers).

Only the standard library and tensorflow are used (tf.train.Example is
TensorFlow's protobuf class).
"""

import argparse
import base64
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

MAX_REPORTED = 40      # mismatch lines printed before "... and N more"
INSPECT_TIMEOUT = 300  # seconds
RECORD_OVERHEAD = 16   # uint64 length, uint32 masked CRC of it, uint32 masked CRC of the data

KINDS = ("bytes_list", "float_list", "int64_list")


class Failures:
    def __init__(self):
        self.lines = []

    def add(self, msg):
        self.lines.append(msg)

    def __bool__(self):
        return bool(self.lines)

    def print(self):
        for line in self.lines[:MAX_REPORTED]:
            print("MISMATCH: " + line)
        if len(self.lines) > MAX_REPORTED:
            print("... and %d more mismatches" % (len(self.lines) - MAX_REPORTED))


# ------------------------------------------------------------ TensorFlow side

def tf_read(tf, path, compression):
    """Every record of `path` as TensorFlow reads it:
    [{"index", "offset", "features": {name: (kind, [values])}}].
    Values: bytes, float (the exact float32 value) or int. Each record is
    parsed twice, as a protobuf message (which gives the names and kinds) and
    with tf.io.parse_single_example (which gives the values TF's ops see);
    the two must agree."""
    dtypes = {"bytes_list": tf.string, "float_list": tf.float32, "int64_list": tf.int64}
    ds = tf.data.TFRecordDataset([path], compression_type="GZIP" if compression == "gzip" else "")
    records = []
    offset = 0
    for index, record in enumerate(ds):
        raw = record.numpy()
        try:
            example = tf.train.Example.FromString(raw)
        except Exception as e:  # google.protobuf.message.DecodeError
            raise RuntimeError("record %d (offset %d, %d bytes) is not a tf.Example: %s"
                               % (index, offset, len(raw), e))
        kinds = {}
        for name, feature in example.features.feature.items():
            kinds[name] = feature.WhichOneof("kind")
        spec = {name: tf.io.VarLenFeature(dtypes[kind or "int64_list"]) for name, kind in kinds.items()}
        parsed = tf.io.parse_single_example(record, spec) if spec else {}
        features = {}
        for name, kind in kinds.items():
            tensor = parsed[name].values.numpy()
            if kind == "bytes_list":
                values = [bytes(v) for v in tensor]
            elif kind == "float_list":
                values = [float(v) for v in tensor]
            else:
                values = [int(v) for v in tensor]
            proto_values = list(getattr(example.features.feature[name], kind).value) if kind else []
            if not same_values(kind or "int64_list", proto_values, values):
                raise RuntimeError("TensorFlow disagrees with itself on record %d, feature %r: "
                                   "protobuf %r, parse_single_example %r"
                                   % (index, name, short(proto_values), short(values)))
            features[name] = (kind, values)
        records.append({"index": index, "offset": offset, "features": features})
        offset += len(raw) + RECORD_OVERHEAD
    return records


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def same_values(kind, a, b):
    if len(a) != len(b):
        return False
    if kind != "float_list":
        return list(a) == list(b)
    for x, y in zip(a, b):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif f32_bits(x) != f32_bits(y):
            return False
    return True


def short(values, n=8):
    values = list(values)
    return values if len(values) <= n else values[:n] + ["... %d values" % len(values)]


# ------------------------------------------------------------- ActorFlow side

class Num:
    """A JSON number, with the text it was written as."""

    def __init__(self, text, is_int):
        self.text = text
        self.is_int = is_int

    def __repr__(self):
        return self.text


def no_duplicate_keys(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("duplicate key %r in one JSON object" % k)
        obj[k] = v
    return obj


def reject_constant(name):
    raise ValueError("%s is not JSON (write NaN and infinities as \"nan\", \"inf\", \"-inf\")" % name)


def parse_json_line(line):
    return json.loads(line, parse_int=lambda s: Num(s, True), parse_float=lambda s: Num(s, False),
                      parse_constant=reject_constant, object_pairs_hook=no_duplicate_keys)


def run_inspect(binary, path, compression):
    cmd = [binary, "inspect", path, "--json", "--show", "all"]
    if compression == "gzip":
        cmd += ["--compression", "gzip"]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=INSPECT_TIMEOUT)
    except FileNotFoundError:
        raise RuntimeError("cannot run %s: no such file" % binary)
    except PermissionError:
        raise RuntimeError("cannot run %s: not executable" % binary)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s timed out after %d s" % (" ".join(cmd), INSPECT_TIMEOUT))
    return cmd, proc


def inspect_records(binary, path, compression, failures):
    """ActorFlow's view of `path`, as a list of decoded records (None if it
    could not be had at all)."""
    cmd, proc = run_inspect(binary, path, compression)
    if proc.returncode != 0:
        failures.add("`%s` exited %d; stderr: %s"
                     % (" ".join(cmd), proc.returncode, proc.stderr.decode("utf-8", "replace").strip()[-2000:]))
        return None
    try:
        text = proc.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        failures.add("inspect output is not UTF-8: %s" % e)
        return None
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = parse_json_line(line)
        except ValueError as e:
            failures.add("inspect output line %d is not valid JSON (%s): %.200s" % (lineno, e, line))
            return None
        records.append(obj)
    return records


def decode_value(kind, v, where):
    """One list element of ActorFlow's JSON -> (python value, error)."""
    if kind == "bytes_list":
        if not isinstance(v, str):
            return None, "%s: expected a base64 string, got %r" % (where, v)
        try:
            return base64.b64decode(v.encode("ascii"), validate=True), None
        except (ValueError, UnicodeEncodeError) as e:
            return None, "%s: bad base64 %r (%s)" % (where, v[:60], e)
    if kind == "float_list":
        if isinstance(v, str):
            special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if v in special:
                return special[v], None
            return None, "%s: expected a number or \"nan\"/\"inf\"/\"-inf\", got the string %r" % (where, v)
        if isinstance(v, Num):
            return float(v.text), None
        return None, "%s: expected a number, got %r" % (where, v)
    if isinstance(v, Num) and v.is_int:
        return int(v.text), None
    return None, "%s: expected a JSON integer, got %r" % (where, v)


def show_float(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    try:
        return "%r (0x%08x)" % (x, f32_bits(x))
    except OverflowError:
        return "%r (outside float32)" % x


def show(kind, x):
    if kind == "float_list":
        return show_float(x)
    if kind == "bytes_list":
        return "%r (%d bytes)" % (x[:48] + (b"..." if len(x) > 48 else b""), len(x))
    return repr(x)


def compare_feature(index, name, exp_kind, exp_values, got, failures):
    where = "record %d, feature %r" % (index, name)
    if not isinstance(got, dict) or len(got) != 1:
        failures.add("%s: expected an object with one of %s, got %.200r" % (where, ", ".join(KINDS), got))
        return
    got_kind, got_list = next(iter(got.items()))
    if exp_kind is None:  # a Feature with no list set: TF reads it as empty
        if got_kind not in KINDS or got_list != []:
            failures.add("%s: expected an empty list (the feature has no kind), got %.200r" % (where, got))
        return
    if got_kind != exp_kind:
        failures.add("%s: expected %s, got %s" % (where, exp_kind, got_kind))
        return
    if not isinstance(got_list, list):
        failures.add("%s: %s is not a JSON array: %.200r" % (where, got_kind, got_list))
        return
    if len(got_list) != len(exp_values):
        failures.add("%s: expected %d values, got %d" % (where, len(exp_values), len(got_list)))
    for i, (e, g) in enumerate(zip(exp_values, got_list)):
        w = "%s, %s[%d]" % (where, exp_kind, i)
        value, err = decode_value(exp_kind, g, w)
        if err:
            failures.add(err)
            continue
        if exp_kind == "float_list":
            if math.isnan(e):
                ok = math.isnan(value)
            elif math.isnan(value):
                ok = False
            else:
                try:
                    ok = f32_bits(value) == f32_bits(e)
                except OverflowError:
                    ok = False
            if not ok:
                failures.add("%s: expected %s, got %s (printed as %r)"
                             % (w, show_float(e), show_float(value), getattr(g, "text", g)))
        elif value != e:
            failures.add("%s: expected %s, got %s" % (w, show(exp_kind, e), show(exp_kind, value)))


def compare(expected, got, failures):
    if len(got) != len(expected):
        failures.add("expected %d records, inspect printed %d" % (len(expected), len(got)))
    for pos, (exp, rec) in enumerate(zip(expected, got)):
        if not isinstance(rec, dict):
            failures.add("line %d of inspect output is not a JSON object" % (pos + 1))
            continue
        index = exp["index"]
        for key in ("index", "offset"):
            v = rec.get(key)
            if not (isinstance(v, Num) and v.is_int and int(v.text) == exp[key]):
                failures.add("record %d: expected \"%s\": %d, got %r" % (index, key, exp[key], v))
        feats = rec.get("features")
        if not isinstance(feats, dict):
            failures.add("record %d: \"features\" missing or not an object: %.200r" % (index, feats))
            continue
        for name in sorted(set(exp["features"]) - set(feats)):
            failures.add("record %d: feature %r missing" % (index, name))
        for name in sorted(set(feats) - set(exp["features"])):
            failures.add("record %d: unexpected feature %r" % (index, name))
        for name in sorted(set(exp["features"]) & set(feats)):
            kind, values = exp["features"][name]
            compare_feature(index, name, kind, values, feats[name], failures)


def check_file(tf, binary, path, compression):
    failures = Failures()
    try:
        expected = tf_read(tf, path, compression)
    except tf.errors.OpError as e:
        print("FAIL: TensorFlow cannot read %s: %s" % (path, e.message.splitlines()[0] if e.message else e))
        return 1
    got = inspect_records(binary, path, compression, failures)
    if got is not None:
        compare(expected, got, failures)
    if failures:
        failures.print()
        print("FAIL: %s: %d mismatches (%d records)" % (path, len(failures.lines), len(expected)))
        return 1
    nfeat = sum(len(r["features"]) for r in expected)
    print("PASS: %s: %d records, %d features identical" % (os.path.basename(path), len(expected), nfeat))
    return 0


# ---------------------------------------------------------------- test data

NAN, INF = math.nan, math.inf
FLOAT_SPECIALS = [NAN, INF, -INF, -0.0, 0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, math.pi,
                  1.401298464324817e-45,      # smallest denormal
                  1.1754942106924411e-38,     # largest denormal
                  1.1754943508222875e-38,     # smallest normal
                  3.4028234663852886e+38,     # largest
                  -3.4028234663852886e+38,
                  16777217.0,                 # not a float32: rounds to 16777216
                  123456.789, -9.99e-10, 6.02214076e23]
INT_SPECIALS = [0, 1, -1, 127, 128, 255, 256, 16383, 16384, 2 ** 31 - 1, 2 ** 31, -2 ** 31,
                2 ** 32, 2 ** 53 + 1, -2 ** 53 - 1, 2 ** 62, -2 ** 62, 2 ** 63 - 1, -2 ** 63]
BYTES_SPECIALS = [b"", b"\x00", b"\x00" * 7, bytes(range(256)), b"\xff\xfe\xfd", b"\x80\x81\xc0",
                  "\u00fcn\u00efc\u00f6d\u00e9 \u540d\u524d".encode(), b"quote\"back\\slash\nnewline",
                  b"plain ascii"]
ODD_NAMES = ["name with space", "\u00fcn\u00ef/\u540d\u524d", "quote\"back\\slash", "tab\tnew\nline",
             "a" * 300, "0"]


def random_floats(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.25:
            out.append(rng.choice(FLOAT_SPECIALS))
        elif r < 0.5:
            out.append(struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0])  # any bit pattern
        else:
            out.append(rng.uniform(-1e3, 1e3))
    return out


def random_ints(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice(INT_SPECIALS))
        elif r < 0.6:
            out.append(rng.getrandbits(64) - 2 ** 63)
        else:
            out.append(rng.randint(-1000, 1000))
    return out


def random_bytes(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.4:
            out.append(rng.choice(BYTES_SPECIALS))
        else:
            out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))))
    return out


def make_examples(tf, count):
    """`count` tf.train.Example messages, the same ones every run."""
    rng = random.Random(20240229)

    def feature(kind, values):
        if kind == "bytes_list":
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if kind == "float_list":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    examples = [tf.train.Example(),                                  # a record of 0 bytes
                tf.train.Example(features=tf.train.Features())]      # features present, no entries
    for i in range(2, count):
        f = {"label": feature("int64_list", [i]),
             "id": feature("bytes_list", [("rec-%d" % i).encode()])}
        sizes = [0, 1, 1, 2, 3, 5, 17, 64]
        f["floats"] = feature("float_list", random_floats(rng, rng.choice(sizes)))
        f["ints"] = feature("int64_list", random_ints(rng, rng.choice(sizes)))
        f["blob"] = feature("bytes_list", random_bytes(rng, rng.choice([0, 1, 1, 2, 4])))
        if i % 5 == 0:
            f["empty_bytes"] = feature("bytes_list", [])
            f["empty_floats"] = feature("float_list", [])
            f["empty_ints"] = feature("int64_list", [])
        if i == 3:
            f["specials_f"] = feature("float_list", FLOAT_SPECIALS)
            f["specials_i"] = feature("int64_list", INT_SPECIALS)
            f["specials_b"] = feature("bytes_list", BYTES_SPECIALS)
        if i == 7:
            f["long_floats"] = feature("float_list", random_floats(rng, 10000))
        if i == 8:
            f["long_ints"] = feature("int64_list", random_ints(rng, 5000))
        if i == 9:
            f["big_bytes"] = feature("bytes_list", [bytes(rng.getrandbits(8) for _ in range(100000))])
        if i == 11:
            for n, name in enumerate(ODD_NAMES):
                f[name] = feature(KINDS[n % 3], [b"x"] if n % 3 == 0 else [n])
        if i == 12:
            f = {"only_one": feature("float_list", [-0.0])}
        if i == 13:
            f = {"many_%03d" % k: feature(KINDS[k % 3], [b"v%d" % k] if k % 3 == 0 else [k])
                 for k in range(200)}
        examples.append(tf.train.Example(features=tf.train.Features(feature=f)))
    return examples


# Hand-made protobuf wire encoding, for the write_encodings case.
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire_type):
    return varint(field << 3 | wire_type)


def length_delimited(field, payload):
    return tag(field, 2) + varint(len(payload)) + payload


def map_entry(name, feature):  # Features.feature is map<string, Feature>, field 1
    return length_delimited(1, length_delimited(1, name.encode()) + length_delimited(2, feature))


def unpacked_floats(values):     # Feature.float_list (2) -> FloatList.value (1), one fixed32 each
    return length_delimited(2, b"".join(tag(1, 5) + struct.pack("<f", v) for v in values))


def unpacked_ints(values):       # Feature.int64_list (3) -> Int64List.value (1), one varint each
    return length_delimited(3, b"".join(tag(1, 0) + varint(v) for v in values))


def packed_ints(values):
    return length_delimited(3, length_delimited(1, b"".join(varint(v) for v in values)))


def bytes_values(values):        # Feature.bytes_list (1) -> BytesList.value (1)
    return length_delimited(1, b"".join(length_delimited(1, v) for v in values))


def odd_encodings():
    """Wire forms that are valid protobuf and that TensorFlow's example parser
    reads the same way as the protobuf library. (TensorFlow's parser rejects
    some valid forms, so they are not here: unknown fields below Example, a
    list given twice in one Feature, a map entry without key or value.)"""
    unknown = (tag(99, 0) + varint(12345) + length_delimited(100, b"ignored")
               + tag(101, 1) + b"\x01" * 8 + tag(102, 5) + b"\x02" * 4)
    return [
        # unpacked repeated scalars: one tag per value
        length_delimited(1, map_entry("f", unpacked_floats([1.5, -0.0, NAN, INF, -2.25]))
                         + map_entry("i", unpacked_ints([1, -1, 2 ** 62, -2 ** 63, 0]))),
        # empty packed lists (zero-length payloads)
        length_delimited(1, map_entry("f", length_delimited(2, length_delimited(1, b"")))
                         + map_entry("i", packed_ints([]))),
        # unknown fields of every wire type in Example, before and after `features`
        unknown + length_delimited(1, map_entry("b", bytes_values([b"a", b""]))) + unknown,
        # the same name twice: the last entry wins, whatever its kind
        length_delimited(1, map_entry("d", packed_ints([1])) + map_entry("d", packed_ints([2, 3]))),
        length_delimited(1, map_entry("d", packed_ints([1])) + map_entry("d", bytes_values([b"x"]))),
        # Example.features given twice: the two maps merge
        length_delimited(1, map_entry("a", packed_ints([1]))) + length_delimited(1, map_entry("b", unpacked_floats([2.0]))),
        # a map entry with its key after its value, and an empty key
        length_delimited(1, length_delimited(1, length_delimited(2, packed_ints([5])) + length_delimited(1, b"late_key"))
                         + map_entry("", packed_ints([6]))),
        # varints longer than they need to be (1 written in 3 bytes, a name length in 2)
        length_delimited(1, length_delimited(1, tag(1, 2) + b"\x81\x00" + b"n"
                                             + length_delimited(2, length_delimited(3, length_delimited(1, b"\x81\x80\x00"))))),
    ]


def write_records(tf, path, payloads, compression):
    options = tf.io.TFRecordOptions(compression_type="GZIP") if compression == "gzip" else None
    with tf.io.TFRecordWriter(path, options) as writer:
        for p in payloads:
            writer.write(p)


# --------------------------------------------------------------------- cases

def case_write(tf, args, workdir, compression):
    path = os.path.join(workdir, "tf_written%s.tfrecord" % (".gz" if compression == "gzip" else ""))
    examples = make_examples(tf, args.records)
    write_records(tf, path, [e.SerializeToString(deterministic=True) for e in examples], compression)
    print("wrote %s (%d records, %d bytes)" % (path, len(examples), os.path.getsize(path)))
    return check_file(tf, args.actorflow, path, compression)


def case_write_encodings(tf, args, workdir):
    path = os.path.join(workdir, "tf_encodings.tfrecord")
    payloads = odd_encodings()
    for p in payloads:  # TF's protobuf parser must accept each, else the case is wrong
        tf.train.Example.FromString(p)
    write_records(tf, path, payloads, None)
    print("wrote %s (%d records, %d bytes)" % (path, len(payloads), os.path.getsize(path)))
    return check_file(tf, args.actorflow, path, None)


def case_corrupt(tf, args, workdir):
    good = os.path.join(workdir, "good.tfrecord")
    examples = make_examples(tf, 20)
    write_records(tf, good, [e.SerializeToString(deterministic=True) for e in examples], None)
    with open(good, "rb") as f:
        data = f.read()
    lengths = [len(e.SerializeToString(deterministic=True)) for e in examples]
    offsets = [sum(lengths[:i]) + RECORD_OVERHEAD * i for i in range(len(lengths))]
    k = 10
    variants = {
        "data byte flipped in record %d" % k: (offsets[k] + 12 + lengths[k] // 2, None),
        "length CRC of record %d wrong" % k: (offsets[k] + 9, None),
        "data CRC of record %d wrong" % k: (offsets[k] + 12 + lengths[k] + 1, None),
        "file cut inside the last record": (None, offsets[-1] + 12 + lengths[-1] // 2),
    }
    failures = 0
    for i, (what, (flip_at, cut_at)) in enumerate(variants.items()):
        bad = bytearray(data)
        if flip_at is not None:
            bad[flip_at] ^= 0x20
        if cut_at is not None:
            bad = bad[:cut_at]
        path = os.path.join(workdir, "corrupt_%d.tfrecord" % i)
        with open(path, "wb") as f:
            f.write(bad)
        # TensorFlow itself must refuse the file, or the variant tests nothing.
        try:
            for _ in tf.data.TFRecordDataset([path]):
                pass
            print("INTERNAL: TensorFlow accepts the file with %s" % what)
            return 1
        except tf.errors.OpError:
            pass
        cmd, proc = run_inspect(args.actorflow, path, None)
        if proc.returncode == 0:
            print("MISMATCH: %s: `%s` exited 0, expected non-zero" % (what, " ".join(cmd)))
            failures += 1
        elif proc.returncode < 0:
            print("MISMATCH: %s: actorflow died of signal %d" % (what, -proc.returncode))
            failures += 1
        else:
            print("ok: %s: exit %d, %s" % (what, proc.returncode,
                                         proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or "no message"))
    if failures:
        print("FAIL: corrupt: %d of %d corrupt files accepted" % (failures, len(variants)))
        return 1
    print("PASS: corrupt: all %d corrupt files rejected" % len(variants))
    return 0


def case_hash_bucket(tf, args, workdir):
    rng = random.Random(22)
    strings = ([b"", "café".encode(), b"\x00", b"\x00\xff"]
               + [("word%d" % i).encode() for i in range(1000)]
               + [bytes(rng.randrange(256) for _ in range(n % 301))
                  for n in range(18996)])
    source = os.path.join(workdir, "strings.tfrecord")
    payloads = []
    for i, s in enumerate(strings):
        ex = tf.train.Example()
        ex.features.feature["s"].bytes_list.value.append(s)
        ex.features.feature["i"].int64_list.value.append(i)
        payloads.append(ex.SerializeToString(deterministic=True))
    write_records(tf, source, payloads, None)
    buckets = {"fp_1000": 1000, "fp_7": 7, "fp_big": 2 ** 62}
    features = "".join('feature { input: "s" output: "%s" buckets: %d } ' % kv
                       for kv in buckets.items())
    topology = os.path.join(workdir, "hash.pbtxt")
    with open(topology, "w") as f:
        f.write("""name: "hash-interop"
stage { name: "read" type: "tfrecord_source"
        tfrecord_source { files: "%s" records_per_item: 97 epochs: 1 } }
stage { name: "parse" type: "example_parse" input { stage: "read" }
        example_parse { feature { name: "s" type: "bytes" }
                        feature { name: "i" type: "int64" } } }
stage { name: "hash" type: "hash_bucket" input { stage: "parse" }
        hash_bucket { hash: "fingerprint64" %s } }
stage { name: "save" type: "tfrecord_sink" input { stage: "hash" }
        tfrecord_sink { path: "%s" fields: ["i", "fp_1000", "fp_7", "fp_big"] } }
""" % (source, features, os.path.join(workdir, "ids")))
    cmd = [args.actorflow, "run", topology]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=INSPECT_TIMEOUT)
    if proc.returncode != 0:
        print("FAIL: `%s` exited %d: %s" % (" ".join(cmd), proc.returncode,
              proc.stderr.decode("utf-8", "replace")[-2000:]))
        return 1
    got = {}
    spec = {k: tf.io.FixedLenFeature([], tf.int64) for k in ["i"] + list(buckets)}
    outputs = sorted(os.path.join(workdir, f) for f in os.listdir(workdir)
                     if f.startswith("ids-") and f.endswith(".tfrecord"))
    for rec in tf.data.TFRecordDataset(outputs):
        ex = tf.io.parse_single_example(rec, spec)
        i = int(ex["i"])
        if i in got:
            print("MISMATCH: record %d written twice" % i)
            return 1
        got[i] = {k: int(ex[k]) for k in buckets}
    failures = 0
    if sorted(got) != list(range(len(strings))):
        print("MISMATCH: %d of %d records came back" % (len(got), len(strings)))
        failures += 1
    keras_hashing = None
    try:
        keras_hashing = tf.keras.layers.Hashing
    except Exception as e:  # no Keras: to_hash_bucket_fast alone decides
        print("note: tf.keras.layers.Hashing unavailable (%s)" % e)
    for name, n in buckets.items():
        want = tf.strings.to_hash_bucket_fast(tf.constant(strings), n).numpy()
        if keras_hashing is not None and n < 2 ** 31:
            via_keras = keras_hashing(num_bins=n)(tf.constant(strings)).numpy()
            if list(via_keras.reshape(-1)) != list(want):
                print("INTERNAL: Hashing(%d) differs from to_hash_bucket_fast" % n)
                return 1
        for i, s in enumerate(strings):
            if i in got and got[i][name] != int(want[i]):
                failures += 1
                if failures <= MAX_REPORTED:
                    print("MISMATCH: %s (%d buckets) of %r (length %d): actorflow %d, "
                          "TensorFlow %d" % (name, n, s[:20], len(s), got[i][name], want[i]))
    if failures:
        print("FAIL: hash_bucket: %d mismatches" % failures)
        return 1
    print("PASS: hash_bucket: %d strings x %d bucket counts, the same ids as TensorFlow"
          % (len(strings), len(buckets)))
    return 0


CASES = ("read_ours", "write_plain", "write_gzip", "write_encodings", "corrupt",
         "hash_bucket")


def main():
    ap = argparse.ArgumentParser(description="ActorFlow <-> TensorFlow TFRecord interop tests",
                                 epilog="cases: " + ", ".join(CASES))
    ap.add_argument("--actorflow", required=True, help="path of the actorflow binary")
    ap.add_argument("--case", required=True, choices=CASES)
    ap.add_argument("--file", action="append",
                    help="read_ours: a TFRecord file written by `actorflow convert` (repeatable)")
    ap.add_argument("--compression", choices=("auto", "none", "gzip"), default="auto",
                    help="read_ours: how --file is compressed (default auto: gzip if it starts "
                         "with gzip's magic bytes)")
    ap.add_argument("--records", type=int, default=50, help="write_*: number of records (default 50)")
    ap.add_argument("--workdir", help="keep the files written here (default: a temporary folder, removed)")
    args = ap.parse_args()
    if args.case == "read_ours" and not args.file:
        ap.error("--case read_ours needs --file")
    if args.records < 14:
        ap.error("--records must be at least 14")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except Exception as e:  # ImportError, or a broken install
        why = "cannot import tensorflow (%s: %s)" % (type(e).__name__, e)
        if os.environ.get("CI"):
            print("FAIL: %s (CI is set: a missing test dependency is a failure, not a skip)" % why)
            return 1
        print("SKIP: " + why)
        return 0

    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        workdir = args.workdir
    else:
        workdir = tempfile.mkdtemp(prefix="af_tf_interop_")
    try:
        if args.case == "read_ours":
            rc = 0
            for path in args.file:
                if not os.path.isfile(path):
                    print("FAIL: no file %s" % path)
                    rc = 1
                    continue
                compression = args.compression
                if compression == "auto":
                    with open(path, "rb") as f:
                        compression = "gzip" if f.read(2) == b"\x1f\x8b" else "none"
                rc = max(rc, check_file(tf, args.actorflow, path, compression))
            return rc
        if args.case == "write_plain":
            return case_write(tf, args, workdir, None)
        if args.case == "write_gzip":
            return case_write(tf, args, workdir, "gzip")
        if args.case == "write_encodings":
            return case_write_encodings(tf, args, workdir)
        if args.case == "hash_bucket":
            return case_hash_bucket(tf, args, workdir)
        return case_corrupt(tf, args, workdir)
    except RuntimeError as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
