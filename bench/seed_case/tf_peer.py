#!/usr/bin/env python3
"""The seed's system as the peer: TensorFlow ParameterServerStrategy on click logs.

Trains, in TensorFlow 2 with tf.distribute.ParameterServerStrategy, the model
of the recommender case study on the TFRecords that `actorflow convert csv`
writes (tf.train.Example: label int64, I1..I13 float, C1..C26 bytes,
planted_logit float):

  each C_j -> tf.strings.to_hash_bucket_fast(C_j, BUCKETS) -> its own
              embedding table [BUCKETS, DIM]   (26 tables)
  each I_k -> log1p(max(I_k, 0)) -> (x - mean_k) / std_k
  concat(26 x DIM embeddings, 13 numerics) -> MLP (ReLU) -> 1 logit,
  sigmoid binary cross-entropy, Adagrad, asynchronous updates.

The cluster is real: PS and worker tasks are separate local processes, each a
tf.distribute.Server on 127.0.0.1 on a free port; this process is the chief
(tf.distribute.coordinator.ClusterCoordinator).  Embedding tables are
partitioned over the PS tasks with MinSizePartitioner, as the TensorFlow
tutorial recommends.  Input per worker follows the seed's recipe:
TFRecordDataset (interleaved shards) -> shuffle -> repeat -> batch(B) ->
map(parse_example + transforms, num_parallel_calls=AUTOTUNE,
deterministic=False) -> prefetch(4).

With --workers 1 --same-order --init-like-actorflow --seed S it trains on
the batches, in the order, and from the initial weights of ActorFlow's
example without shuffles and with runtime { seed: S }: the check that the
two systems compute the same training (bench/seed_case/same_order.sh).

Result: one JSON line on stdout (and in --json FILE); progress on stderr.
See bench/seed_case/README.md for why each setting is what it is.
"""
import argparse
import atexit
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

N_NUM, N_CAT = 13, 26
NUM_KEYS = ["I%d" % (k + 1) for k in range(N_NUM)]
CAT_KEYS = ["C%d" % (j + 1) for j in range(N_CAT)]

T0 = time.time()  # launch time: start-up is measured from here


def log(msg):
    print("[tf_peer %7.1fs] %s" % (time.time() - T0, msg), file=sys.stderr,
          flush=True)


def die(msg, code=2):
    print("tf_peer: error: %s" % msg, file=sys.stderr, flush=True)
    sys.exit(code)


# --------------------------------------------------------------------------
# Command line

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="tf_peer.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__,
        epilog="""\
timing:
  startup_s   launch of this script -> first training step scheduled: starting
              the PS/worker processes (each imports TensorFlow), connecting
              the coordinator, creating the variables on the PS, counting rows
              (without --train-rows), loading the test set, building the
              per-worker datasets and iterators.
  wall_s      first step scheduled -> last step finished (coordinator.join),
              evaluations during training included (they run on the chief
              while the workers keep training); the final evaluation is not.
  first_closure_s  training start -> first closure finished (tracing the step
              function on the chief and instantiating it on the workers)
  samples_per_s               = steps * batch / wall_s
  samples_per_s_with_startup  = steps * batch / (startup_s + wall_s)
  samples_per_s_steady        = rate between the 10th and 90th percentile of
                                step completion times (no warm-up, no tail)

utilization (measured inside each training step on the worker, with
tf.timestamp() around next(iterator) and around the update):
  input_wait_s   time blocked in next(iterator): the prefetch buffer was empty
  step_s         forward, backward and the Adagrad updates on the PS
  busy_share     (input_wait_s + step_s) / wall_s; the rest is the worker idle
                 between closures (coordinator dispatch and RPC latency)

evaluation: the exact AUC (rank statistic, ties averaged) of the model's
logits on every test row (or --test-rows), computed with NumPy on the chief,
which reads the variables from the PS while the workers go on training (an
asynchronous snapshot, as in the TensorFlow tutorial's inline evaluation).
planted_auc is the same statistic for the planted_logit feature.  Each entry
of "evals" holds t_s (training time when the evaluation started), steps_done
(the step counter on the PS then), auc and eval_s.  time_to_target_s is the
t_s of the first evaluation with auc >= --target-auc, null if none reached it.

exit status: 0 done, 1 training failed (a child process died, TF error),
2 usage / missing files, 3 --timeout reached, 130 interrupted (SIGINT, SIGTERM
or SIGHUP); in every case the PS and worker processes are killed.  The
children also die with the chief if it is killed with SIGKILL
(PR_SET_PDEATHSIG, and a thread watching the parent).  Logs of a failed run
stay in --log-dir (or the temporary directory named on stderr).

example:
  build/venv/bin/python bench/seed_case/tf_peer.py \\
      --train 'DIR/train-*.tfrecord' --test 'DIR/test-*.tfrecord' \\
      --planted-json DIR/planted.json --workers 6 --ps 2 --cpus 0,1 \\
      --eval-every-steps 500 --target-auc 0.75 --json result.json
""")
    g = ap.add_argument_group("data")
    g.add_argument("--train", action="append", required=False, metavar="GLOB",
                   help="training TFRecord files (glob; repeat the option or "
                        "separate with commas for several patterns)")
    g.add_argument("--test", action="append", required=False, metavar="GLOB",
                   help="test TFRecord files (glob), evaluated exactly on the "
                        "chief")
    g.add_argument("--planted-json", metavar="FILE",
                   help="JSON with numeric_mean and numeric_std (13 each), the "
                        "statistics of log1p(max(I,0)) used to standardize the "
                        "numerics; without it (or without those keys) they are "
                        "computed from the first 100k training rows")
    g.add_argument("--train-rows", type=int, default=0,
                   help="training rows (records in --train); 0 = count them "
                        "once (default)")
    g.add_argument("--test-rows", type=int, default=0,
                   help="evaluate on at most this many test rows (0 = all)")
    g.add_argument("--compression", default="", choices=["", "GZIP", "ZLIB"],
                   help="TFRecord compression (default none)")
    g.add_argument("--shuffle-buffer", type=int, default=10000,
                   help="records in each worker's shuffle buffer (default "
                        "10000; 0 = no record shuffle)")
    g.add_argument("--shard", default="auto",
                   choices=["auto", "files", "records", "none"],
                   help="how workers split the training data: files = each "
                        "worker reads every W-th file; records = each reads "
                        "all files and keeps every W-th record; none = every "
                        "worker reads everything in its own random order; "
                        "auto (default) = files when the file count is a "
                        "multiple of --workers, else records")
    g.add_argument("--cycle-length", type=int, default=4,
                   help="files interleaved per worker (default 4)")
    g.add_argument("--same-order", action="store_true",
                   help="the training files in sorted order, one after the "
                        "other, no record shuffle, a deterministic map: the "
                        "batches, in the order, that ActorFlow's job without "
                        "shuffles trains on (bench/seed_case/same_order.sh). "
                        "Needs --workers 1")

    g = ap.add_argument_group("model and optimizer")
    g.add_argument("--buckets", type=int, default=100000,
                   help="hash buckets (= embedding rows) per categorical "
                        "column (default 100000)")
    g.add_argument("--dim", type=int, default=16,
                   help="embedding dimension (default 16)")
    g.add_argument("--hidden", default="256,128",
                   help="MLP hidden layer widths, ReLU (default 256,128)")
    g.add_argument("--lr", type=float, default=0.05,
                   help="Adagrad learning rate (default 0.05, the default of "
                        "TensorFlow's canned DNNClassifier, whose optimizer is "
                        "Adagrad)")
    g.add_argument("--adagrad-init", type=float, default=0.1,
                   help="Adagrad initial accumulator value (default 0.1, "
                        "Keras and tf.compat.v1.train.AdagradOptimizer)")
    g.add_argument("--adagrad-eps", type=float, default=1e-7,
                   help="Adagrad epsilon (default 1e-7, Keras)")
    g.add_argument("--batch", type=int, default=256,
                   help="batch size per step (per worker) (default 256)")
    g.add_argument("--epochs", type=float, default=1.0,
                   help="passes over the training rows: steps = "
                        "floor(train_rows * epochs / batch) (default 1)")
    g.add_argument("--steps-per-call", type=int, default=10,
                   help="training steps per scheduled closure (Keras' "
                        "steps_per_execution; default 10, as the TensorFlow "
                        "tutorial packs steps: 'it is usually necessary to "
                        "pack multiple steps into a single function to "
                        "achieve optimal performance')")
    g.add_argument("--queue", type=int, default=32,
                   help="closures the chief keeps scheduled ahead of the "
                        "finished ones (default 32); evaluations happen when "
                        "the closure holding step N has finished")
    g.add_argument("--seed", type=int, default=0,
                   help="seed for the initial weights (default 0)")
    g.add_argument("--init-like-actorflow", action="store_true",
                   help="the initial weights ActorFlow draws for runtime "
                        "{ seed: SEED } (--seed): its rule of gpu/init.cpp, "
                        "for the example's model (the tables as one features "
                        "table, in the columns' order; dense layers 1, 3, "
                        "5, ...), instead of TensorFlow's own draw")

    g = ap.add_argument_group("cluster")
    g.add_argument("--workers", type=int, default=6,
                   help="worker processes (default 6, the seed's)")
    g.add_argument("--ps", type=int, default=2,
                   help="parameter server processes (default 2)")
    g.add_argument("--intra", type=int, default=1,
                   help="intra-op threads per process (default 1)")
    g.add_argument("--inter", type=int, default=2,
                   help="inter-op threads per process (default 2)")
    g.add_argument("--cpus", default="",
                   help="pin this process and all its children to these CPUs, "
                        "e.g. 0,1 or 0-1 (default: no pinning)")
    g.add_argument("--timeout", type=float, default=3600,
                   help="wall-clock bound in seconds for the whole run; then "
                        "every process is killed and the exit status is 3 "
                        "(default 3600)")
    g.add_argument("--log-dir", default="",
                   help="where the children's logs go (default: a temporary "
                        "directory, removed on success)")

    g = ap.add_argument_group("evaluation and output")
    g.add_argument("--eval-every-steps", type=int, default=0,
                   help="also evaluate (exact AUC on the test set, on the "
                        "chief, while the workers train) every N scheduled "
                        "steps (default 0 = only at the end)")
    g.add_argument("--target-auc", type=float, default=None,
                   help="report time_to_target_s: training time at the first "
                        "evaluation whose AUC >= this")
    g.add_argument("--eval-batch", type=int, default=8192,
                   help="rows per evaluation batch (default 8192)")
    g.add_argument("--json", metavar="FILE",
                   help="also write the JSON result to FILE")

    # Internal: how this script starts itself as a PS or worker task.
    ap.add_argument("--_role", help=argparse.SUPPRESS)
    ap.add_argument("--_index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_cluster", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def parse_cpus(s):
    cpus = set()
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def expand(patterns, what):
    files = []
    for p in patterns or []:
        for q in p.split(","):
            q = q.strip()
            if not q:
                continue
            hits = sorted(glob.glob(q))
            if not hits:
                die("%s: no file matches '%s'" % (what, q))
            files += hits
    if not files:
        die("%s: give files with --%s GLOB" % (what, what))
    for f in files:
        if not os.path.isfile(f):
            die("%s: '%s' is not a file" % (what, f))
    return files


def thread_env(a):
    env = dict(os.environ)
    env["TF_NUM_INTRAOP_THREADS"] = str(a.intra)
    env["TF_NUM_INTEROP_THREADS"] = str(a.inter)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The tutorial's setting: report worker/PS failures to the coordinator.
    env["GRPC_FAIL_FAST"] = "use_caller"
    return env


# --------------------------------------------------------------------------
# PS / worker task (this script started with --_role)

def run_task(a):
    # Die with the chief even if it is killed with SIGKILL.
    parent = os.getppid()

    def watch_parent():
        while True:
            if os.getppid() != parent:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch_parent, daemon=True).start()
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(json.loads(a._cluster))
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=a.intra,
        inter_op_parallelism_threads=a.inter)
    server = tf.distribute.Server(cluster, job_name=a._role,
                                  task_index=a._index, protocol="grpc",
                                  config=config, start=True)
    print("ready %s:%d" % (a._role, a._index), file=sys.stderr, flush=True)
    server.join()


# --------------------------------------------------------------------------
# Child processes of the chief

class Cluster:
    def __init__(self):
        self.procs = []  # (name, Popen, log path)
        self.lock = threading.Lock()
        self.closing = False

    def start(self, name, argv, env, log_path):
        out = open(log_path, "wb")

        def pre():
            # Its own process group (killed as a whole), and SIGKILL when the
            # chief dies.
            try:
                import ctypes
                ctypes.CDLL("libc.so.6", use_errno=True).prctl(
                    1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            except Exception:
                pass

        p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=pre)
        out.close()
        with self.lock:
            self.procs.append((name, p, log_path))

    def dead(self):
        return [(n, p.returncode, lp) for n, p, lp in self.procs
                if p.poll() is not None]

    def kill_all(self):
        with self.lock:
            self.closing = True
            procs = list(self.procs)
        for _, p, _ in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.time() + 3
        for _, p, _ in procs:
            try:
                p.wait(timeout=max(0.05, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for _, p, _ in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group, even if p exited
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


def tail(path, n=15):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])
    except OSError:
        return "    (no log)"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_ports(addrs, cluster, timeout):
    pending = list(addrs)
    end = time.time() + timeout
    while pending:
        if cluster.dead():
            return False
        if time.time() > end:
            return False
        still = []
        for host, port in pending:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    pass
            except OSError:
                still.append((host, port))
        pending = still
        if pending:
            time.sleep(0.2)
    return True


# --------------------------------------------------------------------------
# ActorFlow's initial values

def _mix64(x):
    """SplitMix64's finalizer on a uint64 array (runtime/core/random.hpp)."""
    import numpy as np

    u = np.uint64
    with np.errstate(over="ignore"):
        x = x + u(0x9E3779B97F4A7C15)
        x = (x ^ (x >> u(30))) * u(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> u(27))) * u(0x94D049BB133111EB)
        return x ^ (x >> u(31))


def actorflow_initial(name, seed, first, count, limit):
    """Elements first .. first+count-1 of ActorFlow's parameter `name`, as
    gpu/init.cpp draws them: element e is uniform in [-limit, limit) from
    the first draw of record_rng(seed, FNV-1a(name), e) (SplitMix64);
    `limit` is the float ActorFlow keeps (0.05f, or Glorot's limit rounded
    to a float)."""
    import numpy as np

    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    u = np.uint64
    e = np.arange(first, first + count, dtype=np.uint64)
    state = _mix64(_mix64(_mix64(u(seed)) ^ u(h)) ^ e)
    unit = (_mix64(state) >> u(11)).astype(np.float64) * 2.0 ** -53
    lim = float(np.float32(limit))
    return (-lim + 2.0 * lim * unit).astype(np.float32)


# --------------------------------------------------------------------------
# Metrics

def exact_auc(labels, scores):
    """Area under the ROC curve, exactly (Mann-Whitney U with tied ranks)."""
    import numpy as np

    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    _, inv, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)            # 1-based rank of each group's last
    avg_rank = ends - (counts - 1) / 2.0  # mean rank within each tie group
    r = avg_rank[inv]
    return float((r[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def check_schema(tf, files, comp, need_planted):
    """The first record of every file must be a tf.Example of our schema."""
    want = {"label": "int64_list"}
    want.update({k: "float_list" for k in NUM_KEYS})
    want.update({k: "bytes_list" for k in CAT_KEYS})
    if need_planted:
        want["planted_logit"] = "float_list"
    for f in files:
        try:
            first = next(iter(tf.data.TFRecordDataset(f, compression_type=comp)
                              .take(1)), None)
        except tf.errors.OpError as e:
            die("%s: not a readable TFRecord file%s (%s)"
                % (f, " with --compression " + comp if comp else "",
                   e.message.splitlines()[0]))
        if first is None:
            continue  # an empty shard is allowed
        try:
            ex = tf.train.Example.FromString(first.numpy())
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            die("%s: the first record is not a tf.train.Example (%s)" % (f, e))
        feats = ex.features.feature
        for k, kind in want.items():
            if k not in feats:
                die("%s: the first record has no feature '%s'" % (f, k))
            got = feats[k].WhichOneof("kind")
            if got != kind:
                die("%s: feature '%s' holds %s, expected %s"
                    % (f, k, got, kind))
            n = len(getattr(feats[k], kind).value)
            if n != 1:
                die("%s: feature '%s' has %d values, expected 1" % (f, k, n))


# --------------------------------------------------------------------------
# The chief

def main_chief(a):
    if a.workers < 1 or a.ps < 1:
        die("--workers and --ps must be at least 1")
    if a.batch < 1 or a.buckets < 1 or a.dim < 1 or a.epochs <= 0:
        die("--batch, --buckets, --dim and --epochs must be positive")
    if a.steps_per_call < 1:
        die("--steps-per-call must be at least 1")
    try:
        hidden = [int(h) for h in a.hidden.split(",") if h.strip()]
    except ValueError:
        die("--hidden: '%s' is not a comma-separated list of widths" % a.hidden)
    if any(h < 1 for h in hidden):
        die("--hidden: widths must be positive")
    if a.init_like_actorflow and a.seed < 0:
        die("--init-like-actorflow: --seed must be >= 0 (ActorFlow's "
            "runtime.seed is unsigned), got %d" % a.seed)
    if a.same_order and a.workers != 1:
        die("--same-order needs --workers 1 (with more, the asynchrony "
            "decides which worker trains which batch when)")
    train_files = expand(a.train, "train")
    test_files = expand(a.test, "test")
    stats = None
    stats_source = "computed from the first 100k training rows"
    if a.planted_json:
        try:
            with open(a.planted_json) as f:
                pj = json.load(f)
        except OSError as e:
            die("--planted-json: %s" % e)
        except ValueError as e:
            die("--planted-json: %s: not JSON (%s)" % (a.planted_json, e))
        m, s = pj.get("numeric_mean"), pj.get("numeric_std")
        if m is not None and s is not None:
            if len(m) != N_NUM or len(s) != N_NUM:
                die("--planted-json: numeric_mean and numeric_std must hold "
                    "%d numbers each" % N_NUM)
            stats = ([float(x) for x in m], [max(float(x), 1e-6) for x in s])
            stats_source = a.planted_json
        else:
            log("%s has no numeric_mean/numeric_std: computing them from the "
                "first 100k training rows" % a.planted_json)
    else:
        log("no --planted-json: numeric mean/std computed from the first 100k "
            "training rows")

    cpus = parse_cpus(a.cpus) if a.cpus else None
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)  # the children inherit it
        except OSError as e:
            die("--cpus %s: %s" % (a.cpus, e))

    import tempfile
    log_dir = a.log_dir or tempfile.mkdtemp(prefix="tf_peer_logs_")
    os.makedirs(log_dir, exist_ok=True)
    cluster = Cluster()
    result = {}
    state = {"phase": "start"}

    # Clean-up on every way out: normal, exception, Ctrl-C, SIGTERM, timeout.
    atexit.register(cluster.kill_all)

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    # SIGINT too: a shell that starts us in the background sets it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_term)

    def watchdog():
        while True:
            time.sleep(0.5)
            if cluster.closing:
                return
            if time.time() - T0 > a.timeout:
                log("--timeout %.0f s reached during %s: killing everything"
                    % (a.timeout, state["phase"]))
                cluster.kill_all()
                os._exit(3)
            dead = cluster.dead()
            if dead and not cluster.closing:
                for n, rc, lp in dead:
                    log("%s exited with status %s during %s; its log %s:\n%s"
                        % (n, rc, state["phase"], lp, tail(lp)))
                cluster.kill_all()
                os._exit(1)

    ok = False
    try:
        # 1. The processes.
        ports = free_ports(a.ps + a.workers + 1)
        spec = {"chief": ["127.0.0.1:%d" % ports[0]],
                "ps": ["127.0.0.1:%d" % p for p in ports[1:1 + a.ps]],
                "worker": ["127.0.0.1:%d" % p for p in ports[1 + a.ps:]]}
        env = thread_env(a)
        me = os.path.abspath(__file__)
        common = ["--intra", str(a.intra), "--inter", str(a.inter),
                  "--_cluster", json.dumps(spec)]
        for role, n in (("ps", a.ps), ("worker", a.workers)):
            for i in range(n):
                lp = os.path.join(log_dir, "%s-%d.log" % (role, i))
                cluster.start("%s %d" % (role, i),
                              [sys.executable, me, "--_role", role,
                               "--_index", str(i)] + common, env, lp)
        log("started %d PS and %d worker processes (logs in %s)%s"
            % (a.ps, a.workers, log_dir,
               ", pinned to CPUs %s" % cpus if cpus else ""))
        threading.Thread(target=watchdog, daemon=True).start()

        # 2. TensorFlow in the chief, with the same thread settings.
        for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                  "GRPC_FAIL_FAST"):
            os.environ[k] = env[k]
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        state["phase"] = "importing TensorFlow"
        import numpy as np
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(a.intra)
        tf.config.threading.set_inter_op_parallelism_threads(a.inter)
        t_import = time.time() - T0

        # 3. Rows, numeric statistics and the test set, while the children
        #    import TensorFlow.
        state["phase"] = "reading data"
        comp = a.compression or None
        check_schema(tf, train_files, comp, False)
        check_schema(tf, test_files, comp, True)
        if a.train_rows > 0:
            train_rows = a.train_rows
        else:
            t = time.time()
            train_rows = int(tf.data.TFRecordDataset(
                train_files, compression_type=comp).reduce(
                    np.int64(0), lambda n, _: n + 1).numpy())
            log("counted %d training rows in %.1f s (give --train-rows to "
                "skip)" % (train_rows, time.time() - t))
        if train_rows < a.batch:
            die("%d training rows is less than one batch of %d"
                % (train_rows, a.batch))
        num_spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
                    for k in NUM_KEYS}
        if stats is None:
            t = time.time()
            ds = tf.data.TFRecordDataset(train_files, compression_type=comp) \
                .take(100000).batch(4096).map(
                    lambda s: tf.io.parse_example(s, num_spec))
            xs = [np.stack([b[k].numpy() for k in NUM_KEYS], 1) for b in ds]
            x = np.log1p(np.maximum(np.concatenate(xs), 0.0))
            stats = (x.mean(0).tolist(), np.maximum(x.std(0), 1e-6).tolist())
            log("numeric mean/std from %d training rows in %.1f s"
                % (len(x), time.time() - t))
        mean = tf.constant(stats[0], tf.float32)
        std = tf.constant(stats[1], tf.float32)
        buckets = a.buckets

        feat_spec = dict(num_spec)
        feat_spec["label"] = tf.io.FixedLenFeature([], tf.int64)
        for k in CAT_KEYS:
            feat_spec[k] = tf.io.FixedLenFeature([], tf.string, default_value="")

        def transform(serialized):
            """Batch of serialized Examples -> (numerics, hashed ids, label)."""
            f = tf.io.parse_example(serialized, feat_spec)
            x = tf.stack([f[k] for k in NUM_KEYS], axis=1)
            x = (tf.math.log1p(tf.maximum(x, 0.0)) - mean) / std
            c = tf.stack([f[k] for k in CAT_KEYS], axis=1)
            ids = tf.strings.to_hash_bucket_fast(c, buckets)
            y = tf.cast(f["label"], tf.float32)
            return x, ids, y

        t = time.time()
        test_spec = dict(feat_spec)
        test_spec["planted_logit"] = tf.io.FixedLenFeature([], tf.float32)

        def test_transform(s):
            x, ids, y = transform(s)
            p = tf.io.parse_example(s, {"planted_logit": test_spec[
                "planted_logit"]})["planted_logit"]
            return x, ids, y, p

        tds = tf.data.TFRecordDataset(test_files, compression_type=comp)
        if a.test_rows > 0:
            tds = tds.take(a.test_rows)
        tds = tds.batch(a.eval_batch).map(test_transform,
                                          num_parallel_calls=tf.data.AUTOTUNE)
        test_batches = [(bx, bi, by.numpy(), bp.numpy())
                        for bx, bi, by, bp in tds]
        if not test_batches:
            die("test: no records in %s" % ", ".join(test_files))
        test_y = np.concatenate([b[2] for b in test_batches])
        test_p = np.concatenate([b[3] for b in test_batches])
        planted_auc = exact_auc(test_y, test_p)
        log("test set: %d rows, positives %.3f, planted AUC %.4f (%.1f s)"
            % (len(test_y), test_y.mean(), planted_auc, time.time() - t))

        # 4. Strategy and coordinator.
        state["phase"] = "waiting for the PS and workers to listen"
        addrs = [("127.0.0.1", int(x.rsplit(":", 1)[1]))
                 for x in spec["ps"] + spec["worker"]]
        if not wait_ports(addrs, cluster, max(1.0, a.timeout - (time.time() - T0))):
            die("the PS/worker processes did not start", 1)
        t_children = time.time() - T0
        log("all %d processes listen (%.1f s after launch)"
            % (a.ps + a.workers, t_children))
        state["phase"] = "connecting the coordinator"
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(spec), task_type="chief", task_id=0,
            rpc_layer="grpc")
        # The tutorial's recommendation: partition only variables of at least
        # 256 KiB, into at most one shard per PS.
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=a.ps)
        strategy = tf.distribute.ParameterServerStrategy(
            resolver, variable_partitioner=partitioner)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

        # 5. Variables, on the PS.
        state["phase"] = "creating variables"
        tf.random.set_seed(a.seed)
        widths = [N_CAT * a.dim + N_NUM] + hidden + [1]

        def uniform(shape, lim, seed):
            def init(partition_shape=None, partition_offset=None):
                s = partition_shape if partition_shape is not None else shape
                off = partition_offset[0] if partition_offset is not None else 0
                # Stateless and seeded by the shard offset: the same table
                # whatever the partitioning.
                return tf.random.stateless_uniform(
                    s, seed=[seed, off], minval=-lim, maxval=lim)
            return init

        def from_values(values):
            def init(partition_shape=None, partition_offset=None):
                if partition_shape is None:
                    return tf.constant(values)
                off = partition_offset[0]
                return tf.constant(values[off:off + partition_shape[0]])
            return init

        def table_init(j):
            if not a.init_like_actorflow:
                # Keras' Embedding initializer: uniform(-0.05, 0.05).
                return uniform([buckets, a.dim], 0.05, a.seed * 100 + j)
            # ActorFlow's one features table holds the columns' tables one
            # after the other, in the columns' order.
            n = buckets * a.dim
            return from_values(actorflow_initial(
                "0_features/table", a.seed, j * n, n, 0.05).reshape(buckets, a.dim))

        def kernel_init(i, lim):
            if not a.init_like_actorflow:
                return uniform([widths[i], widths[i + 1]], lim, a.seed * 100 + 50 + i)
            # ActorFlow's layers: 0 features, then dense and relu in turn.
            n = widths[i] * widths[i + 1]
            return from_values(actorflow_initial(
                "%d_dense/kernel" % (1 + 2 * i), a.seed, 0, n, lim).reshape(
                    widths[i], widths[i + 1]))

        with strategy.scope():
            tables = [tf.Variable(table_init(j),
                                  shape=[buckets, a.dim], dtype=tf.float32,
                                  name="embedding_%s" % CAT_KEYS[j])
                      for j in range(N_CAT)]
            dense = []
            for i in range(len(widths) - 1):
                lim = (6.0 / (widths[i] + widths[i + 1])) ** 0.5  # Glorot
                w = tf.Variable(kernel_init(i, lim),
                                shape=[widths[i], widths[i + 1]],
                                dtype=tf.float32, name="dense_%d/kernel" % i)
                b = tf.Variable(tf.zeros([widths[i + 1]]), name="dense_%d/bias" % i)
                dense += [w, b]
            # Steps done (what Keras' optimizer.iterations counts) and the
            # counter that gives each worker's dataset its index.
            step_counter = tf.Variable(tf.constant(0, tf.int64), name="steps")
            worker_counter = tf.Variable(tf.constant(0, tf.int64),
                                         name="worker_counter")

        def parts(v):
            vs = getattr(v, "variables", None)  # a ShardedVariable's shards
            return list(vs) if isinstance(vs, (list, tuple)) else [v]

        table_parts = [parts(t) for t in tables]
        # Adagrad accumulators, one per variable (per shard), on its PS task.
        accums = {}
        with strategy.scope():
            for v in [p for t in tables + dense for p in parts(t)]:
                with strategy.extended.colocate_vars_with(v):
                    accums[v.ref()] = tf.Variable(
                        tf.fill(v.shape, tf.constant(a.adagrad_init, tf.float32)),
                        name=v.name.split(":")[0] + "/adagrad")
        n_params = sum(int(np.prod(v.shape)) for v in tables + dense)
        placement = sorted({p.device for ps_ in table_parts for p in ps_})
        log("%d parameters; each table %s in %d shard(s) over %s"
            % (n_params, [buckets, a.dim], len(table_parts[0]), placement))

        def forward(x, ids):
            embs = []
            for j in range(N_CAT):
                # tf.nn.embedding_lookup on the list of shards ("div"
                # partitioning, as ParameterServerStrategy creates them): the
                # gathers run on the PS, only the rows looked up travel.
                embs.append(tf.nn.embedding_lookup(table_parts[j], ids[:, j]))
            h = tf.concat(embs + [x], axis=1)
            for i in range(0, len(dense), 2):
                h = tf.matmul(h, dense[i]) + dense[i + 1]
                if i + 2 < len(dense):
                    h = tf.nn.relu(h)
            return tf.squeeze(h, 1)

        lr = tf.constant(a.lr, tf.float32)
        eps = tf.constant(a.adagrad_eps, tf.float32)
        # Every variable as its shards (the first dense kernel is large
        # enough to be partitioned too); gradients and updates are per shard.
        flat_parts = [p for t in tables + dense for p in parts(t)]

        def step_fn(x, ids, y):
            with tf.GradientTape() as tape:
                logits = forward(x, ids)
                loss = tf.reduce_mean(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=y,
                                                            logits=logits))
            grads = tape.gradient(loss, flat_parts)
            updates = []
            for v, g in zip(flat_parts, grads):
                acc = accums[v.ref()]
                if g is None:
                    continue
                if isinstance(g, tf.IndexedSlices):
                    # Sum duplicate rows first, as Keras' optimizers do.
                    uniq, idx = tf.unique(g.indices)
                    vals = tf.math.unsorted_segment_sum(g.values, idx,
                                                        tf.shape(uniq)[0])
                    updates.append(tf.raw_ops.ResourceSparseApplyAdagradV2(
                        var=v.handle, accum=acc.handle, lr=lr, epsilon=eps,
                        grad=vals, indices=uniq))
                else:
                    updates.append(tf.raw_ops.ResourceApplyAdagradV2(
                        var=v.handle, accum=acc.handle, lr=lr, epsilon=eps,
                        grad=g))
            with tf.control_dependencies(updates):
                return tf.identity(loss)

        def make_train_fn(k_steps):
            @tf.function
            def train_fn(iterator):
                # Per closure: [worker index, input wait s, step s, end time,
                # loss sum, steps] measured on the worker.
                wait = tf.constant(0.0, tf.float64)
                busy = tf.constant(0.0, tf.float64)
                loss_sum = tf.constant(0.0, tf.float32)
                wid = tf.constant(-1, tf.int64)
                for _ in tf.range(k_steps):
                    # After the previous step (loss_sum is its loop variable):
                    # steps run one after the other, as in Keras.
                    with tf.control_dependencies([loss_sum]):
                        t0 = tf.timestamp()
                    with tf.control_dependencies([t0]):
                        x, ids, y, w = next(iterator)
                    with tf.control_dependencies([x, ids, y, w]):
                        t1 = tf.timestamp()
                    with tf.control_dependencies([t1]):
                        loss = strategy.run(step_fn, args=(x, ids, y))
                    with tf.control_dependencies([loss]):
                        t2 = tf.timestamp()
                    wait += t1 - t0
                    busy += t2 - t1
                    loss_sum += loss
                    wid = w[0]
                with tf.control_dependencies([loss_sum]):
                    done = step_counter.assign_add(k_steps)
                with tf.control_dependencies([done]):
                    t_end = tf.timestamp()
                return tf.stack([tf.cast(wid, tf.float64), wait, busy, t_end,
                                 tf.cast(loss_sum, tf.float64),
                                 tf.constant(k_steps, tf.float64)])
            return train_fn

        # 6. The per-worker input pipelines.
        n_files = len(train_files)
        shard = a.shard
        if shard == "auto":
            shard = "files" if n_files % a.workers == 0 else "records"
        if shard == "files" and n_files < a.workers:
            die("--shard files: %d training files for %d workers"
                % (n_files, a.workers))
        if a.workers == 1:
            shard = "none"
        W = a.workers
        cycle = max(1, min(a.cycle_length, n_files))
        shuffle_buffer = a.shuffle_buffer
        if a.same_order:
            cycle, shuffle_buffer = 1, 0
            log("input: %d training files in sorted order, one after the "
                "other, no shuffle; batch %d -> map(parse+transforms, "
                "AUTOTUNE, deterministic=True) -> prefetch(4)"
                % (n_files, a.batch))
        else:
            log("input: %d training files, sharded by %s over %d workers; "
                "batch %d -> map(parse+transforms, AUTOTUNE, "
                "deterministic=False) -> prefetch(4)"
                % (n_files, shard, a.workers, a.batch))

        def dataset_fn():
            # Which worker builds this dataset: a counter on the PS (every
            # worker runs this once when its iterator is created).
            wid = (worker_counter.assign_add(1) - 1) % W
            files = tf.data.Dataset.from_tensor_slices(train_files)
            if shard == "files":
                files = files.shard(W, wid)
            if not a.same_order:
                files = files.shuffle(n_files, reshuffle_each_iteration=True)
            ds = files.interleave(
                lambda f: tf.data.TFRecordDataset(f, compression_type=comp),
                cycle_length=cycle, block_length=1)
            if shard == "records":
                ds = ds.shard(W, wid)
            if shuffle_buffer > 0:
                ds = ds.shuffle(shuffle_buffer, reshuffle_each_iteration=True)
            ds = ds.repeat().batch(a.batch, drop_remainder=True)

            def parse(s):
                x, ids, y = transform(s)
                return x, ids, y, tf.fill([a.batch], wid)

            return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=a.same_order).prefetch(4)

        state["phase"] = "building the per-worker datasets"
        per_worker_ds = coordinator.create_per_worker_dataset(dataset_fn)
        per_worker_it = iter(per_worker_ds)

        test_x = [(bx, bi) for bx, bi, _, _ in test_batches]

        @tf.function(input_signature=[
            tf.TensorSpec([None, N_NUM], tf.float32),
            tf.TensorSpec([None, N_CAT], tf.int64)])
        def predict(x, ids):
            return forward(x, ids)

        predict(test_x[0][0][:2], test_x[0][1][:2])  # trace it now

        evals = []

        def evaluate(t_train, final=False):
            te = time.time()
            done = int(step_counter.read_value().numpy())
            if evals and done == evals[-1]["steps_done"] and not final:
                return evals[-1]["auc"]  # no step since the last one
            scores = np.concatenate([predict(bx, bi).numpy() for bx, bi in test_x])
            auc = exact_auc(test_y, scores)
            e = {"t_s": round(t_train, 3), "steps_done": done,
                 "auc": round(auc, 6), "eval_s": round(time.time() - te, 3)}
            evals.append(e)
            log("eval at %.1f s of training: %d steps done, AUC %.4f "
                "(planted %.4f; eval took %.1f s)"
                % (t_train, done, auc, planted_auc, e["eval_s"]))
            return auc

        total_steps = max(1, int(train_rows * a.epochs) // a.batch)
        k_steps = min(a.steps_per_call, total_steps)
        sizes = [k_steps] * (total_steps // k_steps)
        if total_steps % k_steps:
            sizes.append(total_steps % k_steps)
        n_calls = len(sizes)
        cum = np.cumsum(sizes).tolist()
        fns = {k: make_train_fn(k) for k in set(sizes)}
        t_startup = time.time() - T0
        log("start-up done in %.1f s (TF import in chief %.1f s, processes "
            "listening at %.1f s); training %d steps of %d in %d closures"
            % (t_startup, t_import, t_children, total_steps, a.batch, n_calls))

        # 7. Training.
        state["phase"] = "training"
        t_start = time.time()
        results = []
        next_eval = a.eval_every_steps if a.eval_every_steps > 0 else None
        last_log = t_start
        lead = max(1, a.queue)

        def finished(c):
            """Wait for closure c; evaluate when it completes step N."""
            nonlocal next_eval
            results[c].fetch()
            done = cum[c]
            if next_eval is not None and done >= next_eval and c + 1 < n_calls:
                # The workers keep training the queued closures meanwhile.
                evaluate(time.time() - t_start)
                while next_eval <= done:
                    next_eval += a.eval_every_steps

        for c in range(n_calls):
            if c >= lead:
                # At most --queue closures outstanding: the chief waits for the
                # closure scheduled --queue ago (its result is needed anyway).
                finished(c - lead)
            results.append(coordinator.schedule(fns[sizes[c]],
                                                args=(per_worker_it,)))
            if time.time() - last_log > 10:
                last_log = time.time()
                log("scheduled %d/%d steps" % (cum[c], total_steps))
        for c in range(max(0, n_calls - lead), n_calls):
            finished(c)
        coordinator.join()
        t_end = time.time()
        wall = t_end - t_start
        log("training done: %d steps in %.2f s" % (total_steps, wall))

        # 8. Results.
        state["phase"] = "final evaluation"
        final_auc = evaluate(wall, final=True)
        t_fetch = time.time()
        rows = np.array([r.fetch() for r in results])  # [n_calls, 6]
        fetch_s = time.time() - t_fetch
        samples = total_steps * a.batch
        order = np.argsort(rows[:, 3])
        ends, nsteps = rows[order, 3], rows[order, 5]
        first_step = float(ends[0] - t_start)
        steady = None
        if len(ends) >= 10:
            lo, hi = int(0.1 * len(ends)), int(0.9 * len(ends))
            if ends[hi] > ends[lo]:
                steady = (nsteps[lo + 1:hi + 1].sum() * a.batch
                          / (ends[hi] - ends[lo]))
        per_worker = []
        for w in range(W):
            m = rows[:, 0] == w
            wait, busy = float(rows[m, 1].sum()), float(rows[m, 2].sum())
            per_worker.append({
                "worker": w, "steps": int(rows[m, 5].sum()),
                "input_wait_s": round(wait, 3), "step_s": round(busy, 3),
                "input_wait_share": round(wait / (wait + busy), 4)
                if wait + busy > 0 else None,
                "busy_share": round((wait + busy) / wall, 4)})
        tw = sum(p["input_wait_s"] for p in per_worker)
        tb = sum(p["step_s"] for p in per_worker)
        ttt = None
        if a.target_auc is not None:
            hit = [e["t_s"] for e in evals if e["auc"] >= a.target_auc]
            ttt = hit[0] if hit else None
        result = {
            "system": "tensorflow ParameterServerStrategy",
            "samples_per_s": round(samples / wall, 1),
            "samples_per_s_with_startup": round(samples / (wall + t_startup), 1),
            "samples_per_s_steady": round(steady, 1) if steady else None,
            "steps_per_s": round(total_steps / wall, 2),
            "wall_s": round(wall, 3), "startup_s": round(t_startup, 3),
            "first_closure_s": round(first_step, 3),
            "processes_listening_s": round(t_children, 3),
            "final_auc": round(final_auc, 6), "planted_auc": round(planted_auc, 6),
            "target_auc": a.target_auc, "time_to_target_s": ttt,
            "evals": evals,
            "eval_s_total": round(sum(e["eval_s"] for e in evals), 3),
            "steps": total_steps, "samples": samples, "train_rows": train_rows,
            "test_rows": int(len(test_y)),
            # Mean training loss over the last tenth of the closures.
            "final_loss": round(float(
                rows[order[-max(1, len(rows) // 10):], 4].sum()
                / rows[order[-max(1, len(rows) // 10):], 5].sum()), 5),
            "workers": a.workers, "ps": a.ps, "batch": a.batch,
            "epochs": a.epochs, "buckets": a.buckets, "dim": a.dim,
            "hidden": hidden, "lr": a.lr, "optimizer": "adagrad",
            "adagrad_initial_accumulator": a.adagrad_init,
            "adagrad_epsilon": a.adagrad_eps,
            "steps_per_call": k_steps, "shuffle_buffer": shuffle_buffer,
            "same_order": a.same_order, "init_like_actorflow": a.init_like_actorflow,
            "shard": shard, "train_files": n_files,
            "intra_op_threads": a.intra, "inter_op_threads": a.inter,
            "cpus": cpus, "numeric_stats": stats_source,
            "parameters": n_params,
            "table_shards": len(table_parts[0]),
            "input_wait_share": round(tw / (tw + tb), 4) if tw + tb > 0 else None,
            "worker_busy_share": round((tw + tb) / (wall * W), 4),
            "per_worker": per_worker, "timing_fetch_s": round(fetch_s, 3),
            "tf_version": tf.__version__,
        }
        ok = True
    except KeyboardInterrupt as e:
        log("interrupted (%s) during %s: killing the cluster"
            % (e or "Ctrl-C", state["phase"]))
        cluster.kill_all()
        sys.stderr.flush()
        os._exit(130)
    except SystemExit as e:
        cluster.kill_all()
        sys.stderr.flush()
        os._exit(e.code if isinstance(e.code, int) else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
        log("failed during %s: killing the cluster" % state["phase"])
        cluster.kill_all()
        sys.stderr.flush()
        # os._exit: TensorFlow's exit-time clean-up would only log gRPC
        # errors about the processes just killed.
        os._exit(1)
    finally:
        cluster.kill_all()
    if ok and not a.log_dir:
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
    line = json.dumps(result)
    print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    log("samples/s %.0f (with start-up %.0f, steady %s), AUC %.4f "
        "(planted %.4f), input wait share %s"
        % (result["samples_per_s"], result["samples_per_s_with_startup"],
           result["samples_per_s_steady"], result["final_auc"],
           result["planted_auc"], result["input_wait_share"]))
    # TF's gRPC threads can keep the interpreter alive after the children are
    # gone; the result is out, so leave now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    a = parse_args(sys.argv[1:])
    if a._role:
        run_task(a)
        return
    if not a.train or not a.test:
        die("give --train GLOB and --test GLOB (see --help)")
    main_chief(a)


if __name__ == "__main__":
    main()
