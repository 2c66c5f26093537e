"""iterate() under the job supervisor (docs/python.md, "Supervised as
`actorflow run`"): a job with checkpoints whose source runs on an
`actorflow node` that is killed is started again from its newest
checkpoint on the other node, and the iteration goes on to the end with
every record at least once."""

import glob
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import actorflow
from actorflow._run import binary

RECORDS = 20000


class Node:
    """An `actorflow node` on 127.0.0.1 with a free port, stopped (killed)
    by the test that started it."""

    def __init__(self, tmp_path, name):
        self.out = tmp_path / f"node-{name}.out"
        self.err = tmp_path / f"node-{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(
                [binary(), "node", "--listen", "127.0.0.1:0"],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.port = None
        deadline = time.monotonic() + 30
        while self.port is None and time.monotonic() < deadline:
            for line in self.out.read_text().splitlines():
                if line.startswith("actorflow node listening on 127.0.0.1:"):
                    self.port = int(line.rsplit(":", 1)[1])
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            pytest.fail(f"node {name} did not listen within 30 s: "
                        + self.err.read_text()[-2000:])

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def nodes(tmp_path):
    started = []

    def start(name):
        started.append(Node(tmp_path, name))
        return started[-1]

    yield start
    for n in started:
        n.stop()


def test_a_lost_node_starts_the_job_again_and_the_iteration_goes_on(
        tmp_path, nodes):
    w1, w2 = nodes("w1"), nodes("w2")
    ckpt = tmp_path / "ckpt"
    # The source on w1 (then w2, the only other host it may run on); the
    # batcher and the outlet here. A label per record (classes > records):
    # the record's index.
    text = f'''
name: "py-restart"
runtime {{ seed: 1 metrics_interval_s: 0.1 }}
host {{ name: "w1" address: "127.0.0.1:{w1.port}" }}
host {{ name: "w2" address: "127.0.0.1:{w2.port}" }}
checkpoint {{ dir: "{ckpt}" every_seconds: 0.3 }}
stage {{ name: "read" type: "synthetic_source" hosts: ["w1", "w2"]
        synthetic_source {{ records: {RECORDS} records_per_item: 100
                           record_bytes: 16 classes: 1000000 }} }}
stage {{ name: "batch" type: "batcher" input {{ stage: "read" }}
        batcher {{ batch_size: 100 }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "batch" }} }}
'''
    seen = []
    killed_after = None
    with actorflow.Pipeline.from_text(text).iterate() as it:
        for batch in it:
            seen.append(np.array(batch["label"]))
            if killed_after is None:
                if glob.glob(str(ckpt / "ckpt-*" / "MANIFEST")):
                    w1.stop()  # SIGKILL: the node and the source with it
                    killed_after = len(seen)
                else:
                    time.sleep(0.02)  # a slow loop: the first checkpoint comes
        result = it.result
    assert killed_after is not None, "no checkpoint was written before the end"
    assert result is not None and result.ok, result
    assert len(result.restarts) == 1, result.restarts
    assert "read[0] from host 'w1' to 'w2'" in result.restarts[0]
    labels = np.concatenate(seen)
    # Every record at least once; the ones after the checkpoint may come
    # twice, nothing else.
    counts = np.bincount(labels, minlength=RECORDS)
    assert len(counts) == RECORDS
    assert counts.min() == 1, f"records never seen: {np.flatnonzero(counts == 0)[:10]}"
    assert counts.max() <= 2
    assert killed_after < len(seen)
