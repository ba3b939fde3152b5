"""The residency manager through Python on the simulated device: Genoa and Flow give exactly the
unmanaged results, the device bytes never pass the budget at any event, a budget too small for
one op and pinning over the budget raise DeviceError naming the problem, the timeline is JSON,
the context manager configures and restores, callbacks' exceptions are caught, nothing leaks."""
import json

import numpy as np
import pytest
import torch  # noqa: F401  (PyTorch's meta kernels written in Python: see test_ops_find_room...)

import tensorref as tr

WIDTH, LAYERS = 64, 8
LAYER_BYTES = WIDTH * WIDTH * 4
BUDGET = LAYERS * LAYER_BYTES // 4  # the weights are 4x the budget


pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


@pytest.fixture
def weights():
    tr.manual_seed(7)
    ws = [tr.randn([WIDTH, WIDTH]) * (1.0 / WIDTH ** 0.5) for _ in range(LAYERS)]
    x = tr.randn([16, WIDTH])
    yield ws, x
    for t in ws + [x]:
        t.close()


def forward(ws, x) -> np.ndarray:
    with tr.scope():
        h = x @ ws[0]
        for w in ws[1:]:
            h = (h.relu() @ w).softmax(1) + h
        return h.numpy()


def schema_forward(ws, x) -> np.ndarray:
    """A forward pass of ops that run their schema overload's kernel (matmul, relu, tanh, addmm),
    through the runner of the ops generated from libtorch's schema."""
    with tr.scope():
        h = x @ ws[0]
        for w in ws[1:]:
            h = tr.addmm(h, h.relu(), w, 1, 1).tanh()
        return h.numpy()


def table_forward(ws, x) -> np.ndarray:
    """A forward pass of ops of the table with bodies of their own (gelu, softmax, layer_norm, add,
    sum, mean, cat, stack) and views (transpose), each but the views making a new tensor."""
    with tr.scope():
        h = x @ ws[0]
        for w in ws[1:]:
            g = (h @ w.transpose(0, 1)).gelu()
            h = tr.layer_norm(g + h.softmax(1), [WIDTH], None, None, 1e-5) + tr.stack([g, h], 0).sum() + tr.cat([g, h], 0).mean()
        return h.numpy()


@pytest.mark.parametrize("policy", ["genoa", "flow"])
@pytest.mark.parametrize("run", [schema_forward, table_forward])
def test_ops_find_room_for_their_outputs_where_kernels_allocate_as_on_cuda(weights, policy, run):
    """Where the device's kernels allocate as CUDA's do, without asking the manager, each op has
    room made for its outputs before its kernel: an op run by the schema's runner from its
    overload's meta kernel, an op with a body of its own from that body run over meta copies of
    its inputs. The device's real peak stays within the budget, plus a kernel's scratch, and no
    output comes unreserved. (Some ops have a meta kernel only in PyTorch's Python, relu's among
    them, imported above: in a process without it their outputs come unreserved; see
    docs/residency.md.)"""
    ws, x = weights
    expected = run(ws, x)
    tr.residency.simulate_cuda_allocator(True)
    try:
        with tr.residency.session(policy=policy, budget_bytes=BUDGET):
            for _ in range(3):
                assert np.array_equal(run(ws, x), expected)
                tr.residency.mark_iteration()
            s, memory = tr.residency.stats(), tr.residency.device_memory()
    finally:
        tr.residency.simulate_cuda_allocator(False)
    assert s.evictions > 0 and s.output_bytes_unreserved == 0, s
    assert memory.peak <= BUDGET + memory.scratch_peak, (memory.peak, memory.scratch_peak)


@pytest.mark.parametrize("policy", ["genoa", "flow"])
def test_results_equal_unmanaged_and_budget_holds_at_every_event(weights, policy):
    ws, x = weights
    expected = forward(ws, x)
    events = []
    with tr.residency.session(policy=policy, budget_bytes=BUDGET) as cfg:
        assert cfg.budget_bytes == BUDGET and tr.residency.enabled()
        tr.residency.set_callback(events.append)
        for _ in range(3):
            got = forward(ws, x)
            tr.residency.mark_iteration()
            assert np.array_equal(got, expected)  # bit for bit
        s = tr.residency.stats()
        tr.residency.set_callback(None)
    assert not tr.residency.enabled()
    assert tr.residency.callback_errors() == []
    kinds = {e.kind for e in events}
    assert {"load", "evict", "op_begin", "op_end"} <= kinds
    assert max(e.device_bytes for e in events) <= BUDGET
    assert any(e.op == "matmul" for e in events)
    assert s.budget == BUDGET and 0 < s.peak_device_bytes <= BUDGET
    assert s.ops > 0 and s.loads > 0 and s.evictions > 0
    assert set(s._fields) == {f for f, _ in tr._abi_generated.ResidencyStats._fields_}


def test_flow_learns_the_order_and_prefetches(weights):
    ws, x = weights
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        for _ in range(3):
            forward(ws, x)
            tr.residency.mark_iteration()
        s = tr.residency.stats()
    assert s.prefetches > 0 and s.prefetch_hits > 0


def test_budget_too_small_names_the_op_and_loses_nothing():
    a = tr.ones([64, 64])
    with tr.residency.session(policy="flow", budget_bytes=LAYER_BYTES):  # holds one input, not three
        with pytest.raises(tr.DeviceError) as err:
            (a @ a).close()
        assert tr.residency.stats().peak_device_bytes <= LAYER_BYTES
    e = err.value
    assert e.status_name == "TR_ERR_BUDGET_TOO_SMALL" and e.status == 502
    assert "matmul" in e.message, e.message
    assert a.numpy().sum() == 64 * 64  # the input is intact
    a.close()


def test_pinning_over_the_budget_raises(weights):
    ws, _ = weights
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        assert ws[0].pin_resident() is ws[0]
        assert ws[0].is_resident
        assert tr.residency.stats().pinned_bytes == LAYER_BYTES
        pinned = [ws[0]]
        with pytest.raises(tr.DeviceError) as err:
            for w in ws[1:]:
                pinned.append(w.pin_resident())
        assert err.value.status_name == "TR_ERR_BUDGET_TOO_SMALL"
        assert tr.residency.stats().pinned_bytes <= BUDGET
        for w in pinned:
            w.pin_resident(False)
        assert tr.residency.stats().pinned_bytes == 0


def test_timeline_is_json(weights, tmp_path):
    ws, x = weights
    path = tmp_path / "timeline.json"
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        tr.residency.timeline_start()
        forward(ws, x)
        tr.residency.timeline_write(path)
    with open(path) as f:
        trace = json.load(f)
    entries = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(entries) > 0


def test_timeline_to_an_svg_path_is_a_picture_of_memory_under_the_budget(weights, tmp_path):
    ws, x = weights
    path = tmp_path / "memory.svg"
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        tr.residency.timeline_start()
        for _ in range(2):
            forward(ws, x)
            tr.residency.mark_iteration()
        tr.residency.timeline_write(path)
        peak = tr.residency.stats().peak_device_bytes
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert int(root.get("data-budget-bytes")) == BUDGET
    assert 0 < int(root.get("data-peak-bytes")) <= peak <= BUDGET
    lines = {e.get("class"): e for e in root.iter("{http://www.w3.org/2000/svg}line") if e.get("class")}
    assert int(lines["budget"].get("data-bytes")) == BUDGET
    layers = {e.get("data-role"): e.get("d") for e in root.iter("{http://www.w3.org/2000/svg}path") if e.get("class") == "layer"}
    assert set(layers) == {"weights and inputs", "activations", "saved for backward", "gradients", "state across iterations"}
    bottom = float(root.get("data-plot").split()[3])
    weights_ys = [float(p.split(",")[1]) for p in layers["weights and inputs"].replace("M", "").replace("L", "").replace("Z", "").split()]
    assert min(weights_ys) < bottom - 1, "the weights the forward pass loaded are drawn"


def test_context_manager_restores_the_outer_manager(weights):
    ws, x = weights
    with tr.residency.session(tr.residency.Config(policy="flow", budget_bytes=BUDGET)):
        with tr.residency.session(policy="genoa", budget_bytes=2 * BUDGET):
            assert tr.residency.stats().budget == 2 * BUDGET
        assert tr.residency.enabled() and tr.residency.stats().budget == BUDGET
        forward(ws, x)
    assert not tr.residency.enabled()
    # and it disables on an exception too
    with pytest.raises(RuntimeError):
        with tr.residency.session(policy="flow", budget_bytes=BUDGET):
            raise RuntimeError("boom")
    assert not tr.residency.enabled()


def test_callback_exceptions_are_caught_and_kept(weights):
    ws, x = weights
    expected = forward(ws, x)

    def bad(event):
        raise ValueError(event.kind)

    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        tr.residency.set_callback(bad)
        assert np.array_equal(forward(ws, x), expected)
        errors = tr.residency.callback_errors()
        tr.residency.set_callback(None)
    assert errors and all(isinstance(e, ValueError) for e in errors)
    assert tr.residency.callback_errors() == []


def test_calls_that_need_a_manager_raise_without_one():
    t = tr.ones(1)
    with pytest.raises(tr.ArgumentError):
        tr.residency.stats()
    with pytest.raises(tr.ArgumentError):
        tr.residency.mark_iteration()
    with pytest.raises(tr.ArgumentError):
        t.pin_resident()
    with pytest.raises(ValueError):
        tr.residency.configure(policy="lru", budget_bytes=1)
    t.close()


def test_resident_policy_has_no_budget():
    with tr.residency.session(policy="resident"):
        a = tr.ones(4)
        assert (a + a).numpy().tolist() == [2.0] * 4
        assert tr.residency.stats().budget == 2 ** 64 - 1
        a.close()
