"""NumPy and PyTorch take ActorFlow's arrays without a copy (DLPack), Ctrl-C
stops a job cleanly, and actorflow.run() mirrors `actorflow run`."""

import gc
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import actorflow
from conftest import idx_topology

import torch  # Debian's python3-torch (tests/python/run.sh checks it is there)


def test_torch_from_dlpack_shares_memory(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist)).iterate()
    batch = next(it)
    it.close()
    for name, want in (("image", torch.uint8), ("label", torch.int64)):
        a = batch[name]
        t = torch.from_dlpack(a)
        assert t.dtype == want
        assert t.data_ptr() == a.__array_interface__["data"][0]
        assert tuple(t.shape) == a.shape
        assert np.array_equal(t.numpy(), a)



def test_torch_tensor_keeps_the_batch_alive(fmnist, fmnist_train):
    # Batches of 200 are pooled when freed (see test_batches_outlive_the_job):
    # the next job on other images would overwrite a buffer freed too early.
    it = actorflow.Pipeline.from_text(idx_topology(fmnist, batch=200)).iterate()
    tensors = [torch.from_dlpack(b["image"]) for b in it]
    gc.collect()
    other = actorflow.Pipeline.from_text(idx_topology(fmnist_train, batch=200)).iterate()
    for _ in other:
        pass
    assert torch.equal(torch.cat(tensors), torch.from_numpy(fmnist["pixels"].copy()))


def test_dlpack_of_strided_float_views():
    # A strided view of a float array: the strides travel in elements.
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base.view(actorflow.Array)[:, ::2]
    t = torch.from_dlpack(view)
    assert t.data_ptr() == view.__array_interface__["data"][0]
    assert t.stride() == (6, 2)
    assert torch.equal(t, torch.from_numpy(np.ascontiguousarray(base[:, ::2])))


def test_dlpack_half_and_bfloat16():
    half = np.array([1.5, -2.0, 0.25], dtype=np.float16).view(actorflow.Array)
    t = torch.from_dlpack(half)
    assert t.dtype == torch.float16 and t.tolist() == [1.5, -2.0, 0.25]
    # bf16 fields come as uint16 bits, exported as bfloat16.
    want = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    bits = want.view(torch.int16).numpy().view(np.uint16).view(actorflow.Array)
    bits._af_bf16 = True
    assert torch.equal(torch.from_dlpack(bits), want)
    # A view of another width is not bfloat16.
    assert torch.from_dlpack(bits.view(np.uint8)).dtype == torch.uint8
    with pytest.raises(BufferError):
        np.array([b"x"], dtype=object).view(actorflow.Array).__dlpack__()


def test_unconsumed_capsule_lets_go(fmnist):
    it = actorflow.Pipeline.from_text(idx_topology(fmnist)).iterate()
    a = next(it)["image"]
    it.close()
    before = sys.getrefcount(a)
    capsules = [a.__dlpack__() for _ in range(10)]
    assert sys.getrefcount(a) == before + 10
    del capsules
    gc.collect()
    assert sys.getrefcount(a) == before


def test_ctrl_c_stops_the_job_cleanly(fmnist, tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import actorflow
        from conftest import idx_topology
        fm = {{"images": {fmnist['images']!r}, "labels": {fmnist['labels']!r}}}
        n = 0
        interrupted = False
        with actorflow.Pipeline.from_text(idx_topology(fm, epochs=1000)).iterate() as it:
            try:
                for batch in it:
                    n += 1
                    if n == 3:
                        print("running", flush=True)
            except KeyboardInterrupt:
                interrupted = True
        print("interrupted" if interrupted else "ended", it.result.ok, it.result.stopped, flush=True)
        sys.exit(3 if interrupted else 0)
    """))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "running"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 3, out
    assert "interrupted True True" in out


def test_run_mirrors_the_cli(fmnist, tmp_path):
    job = tmp_path / "job.pbtxt"
    job.write_text(idx_topology(fmnist, epochs=2).replace(
        'type: "outlet" input { stage: "batch" }', 'type: "sink" input { stage: "batch" }'))
    result = actorflow.run(job, threads=2, echo=False)
    assert result.ok and not result.stopped
    assert result.final.records == 20000
    assert result.report["records"] == 20000
    assert {s["name"] for s in result.report["stages"]} == {"read", "batch", "out"}
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('stage { name: "a" type: "no_such_type" }\n')
    with pytest.raises(actorflow.TopologyError) as e:
        actorflow.run(bad, echo=False)
    assert e.value.errors[0].startswith(f"{bad}:1: ")
    with pytest.raises(actorflow.TopologyError) as e:
        actorflow.run(tmp_path / "absent.pbtxt", echo=False)
    assert e.value.errors[0].startswith(f"{tmp_path / 'absent.pbtxt'}: ")
    with pytest.raises(ValueError, match="no-such-option"):
        actorflow.run(job, no_such_option=1, echo=False)
