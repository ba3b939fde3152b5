"""More architectures nobody here wrote, unchanged, on the `tensorref` device: transformers models
from small configs with seeded random weights, each reaching ops the models of
test_torch_device_models.py do not (grouped-query and sliding-window attention, ALiBi, relative
attention and position biases, state-space scans, mixtures of experts, encoder-decoders, audio
and vision front ends, windowed attention over a learned bias). A forward pass under Flow at a
quarter of its unmanaged peak (raised where one op needs more at once: RAISED says where), and
three AdamW steps with dropout at half of it: the outputs and the losses equal the CPU's bit for
bit, and the real peak never exceeds the budget."""
import copy

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from budgets import raised_as_needed  # noqa: E402
from tensorref import residency, torch_device  # noqa: E402

torch_device.register()  # this suite imports tensorref before torch (conftest)

pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")

T = transformers
TEXT = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64)
SEQ2SEQ = dict(vocab_size=96, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128)


def _ids():
    return torch.randint(3, 96, (2, 12))


def _image():
    return torch.randn(2, 3, 32, 32)


# name: (the model, its inputs as keywords); inputs drawn after torch.manual_seed(1).
MODELS = {
    "qwen2": (lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**TEXT, num_key_value_heads=2)), lambda: dict(input_ids=_ids())),
    "gemma2": (lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**TEXT, num_key_value_heads=2, head_dim=16)),
               lambda: dict(input_ids=_ids())),
    "bloom": (lambda: T.BloomForCausalLM(T.BloomConfig(vocab_size=96, hidden_size=64, n_layer=2, n_head=4)),
              lambda: dict(input_ids=_ids())),
    "deberta_v2": (lambda: T.DebertaV2Model(T.DebertaV2Config(**TEXT)), lambda: dict(input_ids=_ids())),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=96, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                           num_heads=4)),
           lambda: dict(input_ids=_ids(), decoder_input_ids=torch.randint(3, 96, (2, 5)))),
    "mamba": (lambda: T.MambaForCausalLM(T.MambaConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2, state_size=8)),
              lambda: dict(input_ids=_ids())),
    "qwen2_moe": (lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(**TEXT, num_key_value_heads=2, num_experts=4,
                                                                 num_experts_per_tok=2, moe_intermediate_size=32,
                                                                 shared_expert_intermediate_size=32)),
                  lambda: dict(input_ids=_ids())),
    "whisper": (lambda: T.WhisperForConditionalGeneration(T.WhisperConfig(
        **SEQ2SEQ, num_mel_bins=16, max_source_positions=32, max_target_positions=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1)),
        lambda: dict(input_features=torch.randn(2, 16, 64), decoder_input_ids=torch.randint(3, 96, (2, 5)))),
    "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                              window_size=4)),
             lambda: dict(pixel_values=_image())),
    "segformer": (lambda: T.SegformerForSemanticSegmentation(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
        decoder_hidden_size=32, patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])),
        lambda: dict(pixel_values=_image())),
    "hubert": (lambda: T.HubertModel(T.HubertConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, conv_dim=(16, 16),
        conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
        lambda: dict(input_values=torch.randn(2, 400))),
}
TRAINED = ["t5", "deberta_v2", "mamba", "qwen2_moe", "whisper", "swin", "hubert"]

# Where a quarter of the peak is less than one op's working set, the forward pass's budget is
# raised to it: Mamba's scan exponentiates its whole [batch, channels, length, state] tensor at
# once (192 KiB of a 171 KiB quarter), Swin's and SegFormer's first convolutions read the image
# and write the patches, HuBERT's positional convolution normalises its weight in one op.
RAISED = {"mamba", "swin", "segformer", "hubert"}


def _made(name):
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    model = make()
    torch.manual_seed(1)
    return model, inputs()


def _first(out):
    for name in ("logits", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    raise AssertionError(f"no output to compare in {type(out).__name__}")


def _on(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()}


def _peak(run):
    with residency.session(policy="resident"):
        run()
        return residency.stats().peak_device_bytes


@pytest.mark.parametrize("name", list(MODELS))
def test_a_forward_pass_equals_the_cpu_at_a_quarter_of_its_peak(name):
    model, inputs = _made(name)
    model.eval()
    with torch.no_grad():
        ref = _first(model(**inputs))

    def forward():
        with torch.no_grad():
            return _first(copy.deepcopy(model).to("tensorref")(**_on(inputs, "tensorref"))).cpu()

    def run(budget):
        with residency.session(policy="flow", budget_bytes=budget):
            return forward(), residency.stats(), residency.device_memory().peak

    (out, s, real), budget = raised_as_needed(run, _peak(forward) // 4, name in RAISED)
    assert torch.equal(out, ref), f"max |diff| {(out - ref).abs().max().item()}"
    assert s.ops > 0 and s.evictions > 0 and real <= budget, (s, real, budget)


def _adamw_losses(model, inputs, device, steps=3):
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    torch.manual_seed(5)
    np.random.seed(5)  # wav2vec2-style models draw their time masks with numpy
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = _first(m(**_on(inputs, device))).float().square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", TRAINED)
def test_adamw_steps_with_dropout_equal_the_cpu_at_half_the_peak(name):
    model, inputs = _made(name)
    model.train()
    ref = _adamw_losses(model, inputs, "cpu")

    def run(budget):
        with residency.session(policy="flow", budget_bytes=budget):
            return _adamw_losses(model, inputs, "tensorref"), residency.stats(), residency.device_memory().peak

    peak = _peak(lambda: _adamw_losses(model, inputs, "tensorref"))
    (got, s, real), budget = raised_as_needed(run, peak // 2, False)
    assert got == ref
    assert s.evictions > 0 and real <= budget, (s, real, budget)
    assert s.pageable_copies == 0, s  # on a GPU, no copy would come from pageable memory
