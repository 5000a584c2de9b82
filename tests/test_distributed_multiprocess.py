"""A run of two processes on localhost (2 virtual CPU devices each) through init_process_group and JAX's CPU
collectives (gloo): collectives, DTensors spanning both processes, and a DDP training loop equal to one
device on the full batch. The ranks are tests/_distributed_worker.py."""
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    getattr(jax.config, "jax_cpu_collectives_implementation", None) is None,
    reason="this jax build has no CPU collectives (jax_cpu_collectives_implementation), which a run of several "
           "CPU processes needs")


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results():
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update(MASTER_ADDR="localhost", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                   JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
                   XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0")
        procs.append(subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "_distributed_worker.py")],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
            assert p.returncode == 0 and lines, f"rank failed (exit {p.returncode}):\n{stdout}\n{stderr[-4000:]}"
            outs.append(json.loads(lines[-1][len("RESULT "):]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


def test_ranks_and_collectives(results):
    r0, r1 = results
    assert (r0["rank"], r1["rank"], r0["world"], r1["world"]) == (0, 1, 2, 2)
    assert r0["local_devices"] == r1["local_devices"] == 2
    for r in results:
        assert r["all_reduce_sum"] == [3.0, 10.0]
        assert r["all_reduce_max"] == [2.0, 0.0]
        assert r["all_reduce_avg"] == [0.5, 2.0]
        assert r["all_gather"] == [[0.0, 0.5], [1.0, 1.5]]
        assert r["all_gather_into_tensor"] == [0.0, 0.5, 1.0, 1.5]
        assert r["broadcast_from_1"] == [101.0]
    # sum of arange(4) + 10 * rank over ranks = [10, 12, 14, 16]; rank r keeps chunk r
    assert r0["reduce_scatter_tensor"] == [10.0, 12.0] and r1["reduce_scatter_tensor"] == [14.0, 16.0]


def test_dtensors_span_both_processes(results):
    r0, r1 = results
    for r in results:
        assert r["distribute_full"] == list(np.arange(8.0))            # rank 0's data (src_data_rank=0)
        assert r["from_local_full"] == [0.0, 0.0, 1.0, 1.0] and r["from_local_shape"] == [4, 1]
    assert r0["distribute_local"] == [0.0, 1.0, 2.0, 3.0] and r1["distribute_local"] == [4.0, 5.0, 6.0, 7.0]
    for r in results:
        assert r["no_src_rank_full"] == [0.0, 1.0, 2.0, 3.0, 104.0, 105.0, 106.0, 107.0]
        assert r["replicate_local"] == list(np.arange(8.0))


def test_ddp_over_two_processes_equals_one_device_on_the_full_batch(results):
    for r in results:
        assert r["ddp_placements"] == ["(Replicate(),)"]
        losses, (device_kind, shape, printed) = r["ddp_losses"]
        assert device_kind != "MeshDevice" and shape == [8, 3] and printed == "tensor("  # a plain rank-local output
    # each rank's loss is its own half's, as in PyTorch; their mean is the full batch's
    np.testing.assert_allclose(np.mean([results[0]["ddp_losses"][0], results[1]["ddp_losses"][0]], axis=0),
                               results[0]["ref_losses"], rtol=2e-6)
    for r in results:
        for g, h in zip(r["ddp_grads0"], r["ref_grads0"]):  # PyTorch's average of the ranks' gradients
            np.testing.assert_allclose(g, h, rtol=2e-5, atol=2e-7)
        for p, q in zip(r["ddp_params"], r["ref_params"]):
            np.testing.assert_allclose(p, q, rtol=2e-5, atol=2e-6)
    np.testing.assert_array_equal(np.concatenate(results[0]["ddp_params"]), np.concatenate(results[1]["ddp_params"]))
