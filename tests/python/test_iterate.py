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


def test_batches_outlive_the_job(fmnist, fmnist_train):
    # Batches of 200 images (156,800 bytes) are big enough for the buffer
    # pool (runtime/core/buffer_pool.hpp): were the kept arrays' buffers freed,
    # the next job, on other images of the same shape, would reuse and
    # overwrite them.
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, batch=200)).iterate()
    kept = [batch["image"] for batch in it]
    it.close()
    del it
    gc.collect()
    addresses = {a.__array_interface__["data"][0] for a in kept}
    other = actorflow.Pipeline.from_text(idx_topology(fmnist_train, batch=200)).iterate()
    reused = sum(b["image"].__array_interface__["data"][0] in addresses for b in other)
    assert reused == 0
    assert np.array_equal(np.concatenate(kept), fmnist["pixels"])


def test_freed_batches_are_recycled(fmnist, fmnist_train):
    # The counterpart of the test above: once the arrays are gone, their
    # buffers do go back to the pool, and the next job reuses them.
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, batch=200)).iterate()
    addresses = {b["image"].__array_interface__["data"][0] for b in it}
    gc.collect()
    other = actorflow.Pipeline.from_text(idx_topology(fmnist_train, batch=200)).iterate()
    reused = sum(b["image"].__array_interface__["data"][0] in addresses for b in other)
    assert reused > 0


def test_bytes_fields_come_as_object_arrays(fmnist_jpeg, fmnist):
    text = f'''
name: "bytes"
stage {{ name: "read" type: "tfrecord_source" tfrecord_source {{ files: "{fmnist_jpeg}" records_per_item: 500 }} }}
stage {{ name: "parse" type: "example_parse" input {{ stage: "read" }}
        example_parse {{ feature {{ name: "image" type: "bytes" }} feature {{ name: "label" type: "int64" }} }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "parse" }} }}
'''
    images, labels = [], []
    for batch in actorflow.Pipeline.from_text(text).iterate():
        assert batch["image"].dtype == object
        images.extend(batch["image"])
        labels.append(batch["label"])
    assert len(images) == 10000
    assert all(isinstance(b, bytes) and b[:2] == b"\xff\xd8" for b in images)
    assert np.array_equal(np.concatenate(labels), fmnist["classes"].astype(np.int64))


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
        deadline = time.monotonic() + 10
        while _items_out(it, "read") <= read2 and time.monotonic() < deadline:
            time.sleep(0.1)
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


def test_stop_and_progress_from_another_thread(fmnist):
    import threading

    it = actorflow.Pipeline.from_text(idx_topology(fmnist, epochs=1000)).iterate()
    seen = []
    errors = []

    def watch():
        try:
            while it.result is None:
                seen.append(it.progress)
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    watcher = threading.Thread(target=watch)
    watcher.start()
    n = 0
    stopper = None
    for _ in it:
        n += 1
        # Stopped from another thread once the watcher saw a report.
        if stopper is None and n >= 20 and seen and seen[-1] is not None:
            stopper = threading.Thread(target=it.stop)
            stopper.start()
    stopper.join()
    watcher.join(timeout=30)
    assert not errors and not watcher.is_alive()
    assert it.result.ok and it.result.stopped
    assert 20 <= n < 100 * 1000
    assert any(p is not None for p in seen)
