"""TensorBoard reads the event files `actorflow run --logdir` writes.

Usage: tb_interop.py --logdir DIR --summary FILE [--resumed-step N]

DIR holds the run directory of one job (train-ctr); FILE is that run's
stdout (its summary). TensorBoard's own reader (EventAccumulator) must see
the scalars we write under the expected tags, with steps in order, and
the final step and test AUC the summary printed, each evaluation once at
the step it evaluated, histograms of every
variable's weights and gradients (trainer histogram_every_steps: 50), and
zero bytes over the network (one process); every file starts with the
file-version event. With --resumed-step, only the newest file is
checked: a SessionLog START at that step, and no scalar before it. Prints "SKIP: ..." and exits 0 where the
tensorboard package cannot be imported (where CI is set: "FAIL: ...", exit 1).
"""
import argparse
import glob
import os
import re
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator)
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader)
except ImportError as e:
    why = (f"the tensorboard package cannot be imported ({e}); "
           "scripts/setup installs it into build/venv")
    if os.environ.get("CI"):
        print(f"FAIL: {why} (CI is set: a missing test dependency is a "
              "failure, not a skip)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(0)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


ap = argparse.ArgumentParser()
ap.add_argument("--logdir", required=True)
ap.add_argument("--summary", required=True)
ap.add_argument("--resumed-step", type=int)
args = ap.parse_args()

run = os.path.join(args.logdir, "train-ctr")
files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")),
               key=os.path.getmtime)
if not files:
    fail(f"no event file in {run}")
for f in files:
    name = os.path.basename(f)
    if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^.]+.*\.actorflow",
                        name):
        fail(f"unexpected file name {name}")
    first = next(iter(EventFileLoader(f).Load()))
    if first.file_version != "brain.Event:2":
        fail(f"{name}: first event is not the file version: {first}")

if args.resumed_step is not None:
    starts = [e.step for e in EventFileLoader(files[-1]).Load()
              if e.HasField("session_log") and e.session_log.status == 1]
    if starts != [args.resumed_step]:
        fail(f"SessionLog START at {starts}, resumed at {args.resumed_step}")
    low = [(e.step, v.tag) for e in EventFileLoader(files[-1]).Load()
           if e.HasField("summary") and e.step < args.resumed_step
           for v in e.summary.value]
    if low:
        fail(f"the resumed run wrote scalars before its start: {low[:5]}")
    print(f"SessionLog START at step {args.resumed_step}; no scalar before it")
    print("PASS")
    sys.exit(0)

summary = open(args.summary).read()
m = re.search(r"^  training: (\d+) steps", summary, re.M)
t = re.search(r"^  test \(step (\d+)\): loss ([0-9.]+), AUC ([0-9.]+)",
              summary, re.M)
if not m or not t:
    fail("the summary has no training or test line:\n" + summary)
steps, auc = int(m.group(1)), float(t.group(3))

ea = EventAccumulator(run, size_guidance={"histograms": 0, "scalars": 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
want = {"train/loss", "train/step", "train/samples_per_s",
        "train/staleness_mean", "train/staleness_max", "evaluate/test_auc",
        "job/records_per_s", "job/network_bytes", "job/network_bytes_per_s",
        "job/coordinator_bytes"}
for stage in ("clicks", "batch", "train", "evaluate"):
    for what in ("items_per_s", "busy", "credit_wait", "replicas"):
        want.add(f"stage/{stage}/{what}")
# Each trainer replica's utilization (docs/monitoring.md).
for what in ("busy", "param_wait", "input_wait"):
    want.add(f"stage/train[0]/{what}")
missing = want - tags
if missing:
    fail(f"tags missing: {sorted(missing)} (have {sorted(tags)})")
for tag in sorted(want):
    ev = ea.Scalars(tag)
    seen = [e.step for e in ev]
    if seen != sorted(seen):
        fail(f"{tag}: steps out of order: {seen}")
last_step = ea.Scalars("train/step")[-1]
if last_step.step != steps or int(last_step.value) != steps:
    fail(f"train/step ends at {last_step.step} ({last_step.value}), the "
         f"summary says {steps} steps")
last_auc = ea.Scalars("evaluate/test_auc")[-1].value
if abs(last_auc - auc) > 1e-3:
    fail(f"evaluate/test_auc ends at {last_auc}, the summary says {auc}")
# Each evaluation once, at the step it evaluated (every_steps: 300, then
# the final one), whenever the progress reports came.
for tag in ("evaluate/test_auc", "evaluate/test_loss"):
    seen = [e.step for e in ea.Scalars(tag)]
    if len(seen) < 3 or len(set(seen)) != len(seen) or seen[-1] != steps \
            or seen[0] < 300:
        fail(f"{tag}: points at steps {seen}; want one per evaluation "
             f"(from step 300 every 300 steps, and the last at {steps})")
for tag in ("job/network_bytes", "job/coordinator_bytes"):
    if ea.Scalars(tag)[-1].value != 0:
        fail(f"{tag} is not 0 in a job of one process")

# Histograms: the model is embedding 200x4 (pulled by row), flatten, dense 1.
sizes = {"0_embedding/table": None, "2_dense/kernel": 16, "2_dense/bias": 1}
htags = set(ea.Tags()["histograms"])
want_h = {f"{kind}/{var}" for kind in ("weights", "gradients")
          for var in sizes}
if want_h - htags:
    fail(f"histograms missing: {sorted(want_h - htags)} (have {sorted(htags)})")
for tag in sorted(want_h):
    events = ea.Histograms(tag)
    seen = [e.step for e in events]
    # Replica 0 makes about steps / 2 / 50 of each.
    if len(seen) < steps // 2 // 50 - 1 or seen != sorted(set(seen)):
        fail(f"{tag}: steps {seen} (the job took {steps} steps)")
    for e in events:
        h = e.histogram_value
        size = sizes[tag.split("/", 1)[1]]
        if size is not None and h.num != size:
            fail(f"{tag} at {e.step}: {h.num} values, the variable has {size}")
        if size is None and (h.num == 0 or h.num % 4 != 0):
            fail(f"{tag} at {e.step}: {h.num} values, not whole rows of 4")
        if sum(h.bucket) != h.num or not h.min <= h.max:
            fail(f"{tag} at {e.step}: buckets {list(h.bucket)} for {h.num} "
                 f"values, min {h.min} max {h.max}")
        if list(h.bucket_limit) != sorted(h.bucket_limit) \
                or abs(h.bucket_limit[-1] - h.max) > 1e-6 * max(1, abs(h.max)):
            fail(f"{tag} at {e.step}: bucket limits {list(h.bucket_limit)}")
print(f"{len(want_h)} histogram tags, {len(ea.Histograms('weights/2_dense/kernel'))} "
      "events each")

print(f"{len(tags)} scalar tags; train/step ends at {steps}, "
      f"evaluate/test_auc at {last_auc:.4f} (summary {auc})")
print("PASS")
