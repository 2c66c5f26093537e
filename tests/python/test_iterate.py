"""actorflow.Pipeline: loading, iterating, zero-copy arrays, lifetimes,
backpressure and errors (docs/python.md)."""

import gc
import time

import numpy as np
import pytest

import actorflow
from conftest import idx_topology


def collect(iterator):
    images, labels, epochs = [], [], []
    for batch in iterator:
        images.append(batch["image"])
        labels.append(batch["label"])
        epochs.append(iterator.epoch)
    return images, labels, epochs


def test_every_record_once_in_order(fmnist):
    p = actorflow.Pipeline.from_text(idx_topology(fmnist, epochs=2))
    it = p.iterate(outlet="out")
    images, labels, epochs = collect(it)
    assert it.result.ok and not it.result.stopped
    # 10,000 records twice, by identity: the same pixels and labels, in order.
    want_pixels = np.concatenate([fmnist["pixels"]] * 2)
    want_labels = np.concatenate([fmnist["classes"]] * 2).astype(np.int64)
    got_pixels = np.concatenate(images)
    assert got_pixels.dtype == np.uint8 and got_pixels.shape == (20000, 28, 28)
    assert np.array_equal(got_pixels, want_pixels)
    assert np.array_equal(np.concatenate(labels).astype(np.int64), want_labels)
    assert epochs == [0] * 100 + [1] * 100
    assert it.result.final.records == 20000


def test_arrays_are_read_only_views_of_the_batch(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist)).iterate()
    batch = next(it)
    it.close()
    image = batch["image"]
    assert isinstance(image, actorflow.Array) and isinstance(image, np.ndarray)
    assert not image.flags.writeable
    assert not image.flags.owndata
    with pytest.raises(ValueError):
        image[0, 0, 0] = 1
    # np.asarray does not copy either.
    assert np.asarray(image).__array_interface__["data"][0] == image.__array_interface__["data"][0]


def test_cache_hands_out_the_same_memory_every_epoch(fmnist):
    # read -> cache -> batch (whole items pass through) -> outlet: if
    # nothing on the way copies, epoch 1's arrays lie where epoch 0's lay.
    middle = '''stage { name: "@NAME@" type: "cache" input { stage: "@IN@" } cache { epochs: 2 } }'''
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, middle=middle)).iterate()
    address = {0: [], 1: []}
    for batch in it:
        address[it.epoch].append(batch["image"].__array_interface__["data"][0])
    assert len(address[0]) == 100 and address[0] == address[1]


def test_batches_outlive_the_job(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist)).iterate()
    kept = [batch["image"] for batch in it]
    it.close()
    del it
    gc.collect()
    # Another job runs (and takes buffers from the pool) meanwhile.
    other = actorflow.Pipeline.from_text(idx_topology(fmnist)).iterate()
    for _ in other:
        pass
    assert np.array_equal(np.concatenate(kept), fmnist["pixels"])


def test_close_early_then_arrays_still_valid(fmnist):
    with actorflow.Pipeline.from_text(idx_topology(fmnist, epochs=50)).iterate() as it:
        first = next(it)["image"]
    assert it.result is not None and it.result.stopped and it.result.ok
    assert np.array_equal(first, fmnist["pixels"][:100])
    with pytest.raises(StopIteration):
        next(it)


def test_epochs_argument_stops_after_that_many(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, epochs=5)).iterate(epochs=2)
    _, labels, epochs = collect(it)
    assert sorted(set(epochs)) == [0, 1] and len(epochs) == 200
    assert np.array_equal(np.concatenate(labels).astype(np.int64),
                          np.concatenate([fmnist["classes"]] * 2).astype(np.int64))
    assert it.result.ok and it.result.stopped


def test_backpressure_bounds_what_is_in_flight(fmnist):
    # 100 epochs of 100 batches: without backpressure the reader would be
    # thousands of items ahead after a second of not consuming.
    text = idx_topology(fmnist, epochs=100, outlet_options="outlet { in_flight: 2 }")
    with actorflow.Pipeline.from_text(text).iterate(threads=2) as it:
        next(it)
        time.sleep(1.5)
        read1 = _items_out(it, "read")
        time.sleep(1.0)
        read2 = _items_out(it, "read")
        # Stalled, and no further ahead than the windows of the edges
        # (8 + 8 by default), the outlet's 2 and the one handed out allow.
        assert read1 == read2
        assert read2 <= 1 + 2 + 8 + 8 + 2
        for _ in range(10):
            next(it)
        time.sleep(0.5)
        assert _items_out(it, "read") > read2


def _items_out(it, stage):
    p = it.progress
    assert p is not None
    return sum(s.items_out for s in p.stages if s.stage == stage)


def test_progress_objects(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, epochs=3)).iterate()
    for _ in it:
        pass
    final = it.progress
    assert isinstance(final, actorflow.Progress)
    assert final.records == 30000
    read = [s for s in final.stages if s.stage == "read"]
    assert len(read) == 1 and read[0].records_out == 30000 and read[0].busy_s >= 0


def test_topology_errors_carry_every_line(tmp_path):
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('name: "x"\nstage { name: "a" type: "no_such_type" }\n'
                   'stage { name: "b" type: "batcher" input { stage: "missing" } }\n')
    with pytest.raises(actorflow.TopologyError) as e:
        actorflow.Pipeline.from_file(bad).validate()
    assert len(e.value.errors) >= 2
    assert any(err.startswith(f"{bad}:2: ") and "no_such_type" in err for err in e.value.errors)
    assert any(err.startswith(f"{bad}:3: ") and "missing" in err for err in e.value.errors)
    with pytest.raises(actorflow.TopologyError) as e:
        actorflow.Pipeline.from_text("stage {", name="mine.pbtxt").iterate()
    assert e.value.errors[0].startswith("mine.pbtxt:")
    with pytest.raises(actorflow.TopologyError) as e:
        actorflow.Pipeline.from_file(tmp_path / "absent.pbtxt").validate()
    assert str(tmp_path / "absent.pbtxt") in e.value.errors[0]


def test_outlet_must_exist(fmnist):
    p = actorflow.Pipeline.from_text(idx_topology(fmnist))
    with pytest.raises(ValueError, match="no outlet stage 'nope'.*'out'"):
        p.iterate(outlet="nope")
    with pytest.raises(ValueError, match="epochs"):
        p.iterate(epochs=0)


def test_job_failure_raises_its_one_line_error(tmp_path):
    broken = tmp_path / "broken.tfrecord"
    broken.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00garbage-that-is-no-tfrecord")
    text = f'''
name: "fails"
stage {{ name: "read" type: "tfrecord_source" tfrecord_source {{ files: "{broken}" }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "read" }} }}
'''
    it = actorflow.Pipeline.from_text(text).iterate()
    with pytest.raises(actorflow.JobError) as e:
        for _ in it:
            pass
    message = str(e.value)
    assert "\n" not in message
    assert "read" in message and str(broken) in message
    assert e.value.result is not None and not e.value.result.ok
    with pytest.raises(StopIteration):
        next(it)


def test_log_level_names():
    actorflow.set_log_level("warn")
    actorflow.set_log_level("info")
    with pytest.raises(ValueError, match="log level"):
        actorflow.set_log_level("loud")
