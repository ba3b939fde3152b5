// A Llama decoder layer through the C# binding, the same as examples/python/llama_layer.py:
// RMSNorm, rotary position embeddings, grouped-query attention through
// ScaledDotProductAttention, a SwiGLU MLP and the two residual additions, written with the
// library's ops (most generated from libtorch's schema), under Flow on the simulated device with
// a budget that holds the largest projection and its activations but not the layer's weights.
//
// Reads the weights, the input `x` and transformers' output `expected` from a safetensors file
// the Python version writes (`--fixture`), and exits 1 unless the output is within 1e-5 of
// transformers' LlamaDecoderLayer and the device bytes stayed within the budget.
//
//   make test-dotnet                  (writes the file and runs this with the other examples)
//   mono LlamaLayer.exe build/examples/llama_layer.safetensors
using System;
using TensorRef;

static class LlamaLayer
{
    // The layer's shape, as examples/python/llama_layer.py configures it.
    const long Hidden = 64, Inter = 172, Heads = 4, KvHeads = 2, HeadDim = Hidden / Heads, Batch = 2, Seq = 8;
    const double Eps = 1e-6, Theta = 10000.0;

    // The last dimension's halves swapped, the second negated: [-x2, x1].
    static Tensor RotateHalf(Tensor x) =>
        torch.Cat(new[] { -x.Narrow(-1, HeadDim / 2, HeadDim / 2), x.Narrow(-1, 0, HeadDim / 2) }, -1);

    static Tensor Layer(Tensor x, Weights w)
    {
        // cos and sin of the rotary angles, [seq, head_dim], as LlamaRotaryEmbedding makes them.
        var invFreq = 1.0 / torch.Arange(0, HeadDim, 2).DivScalar(HeadDim).RpowScalar(Theta);
        var angles = torch.Arange(0, Seq, 1).Outer(invFreq);
        var emb = torch.Cat(new[] { angles, angles }, -1);
        Tensor cos = emb.Cos(), sin = emb.Sin();
        Func<Tensor, string, long, Tensor> project = (n, name, heads) =>
            n.Linear(w[name], null).Reshape(new[] { Batch, Seq, heads, HeadDim }).Transpose(1, 2);
        Func<Tensor, Tensor> rope = q => q * cos + RotateHalf(q) * sin;

        var norm = x.RmsNorm(new[] { Hidden }, w["input_layernorm.weight"], Eps);
        var query = rope(project(norm, "self_attn.q_proj.weight", Heads));
        var key = rope(project(norm, "self_attn.k_proj.weight", KvHeads));
        var value = project(norm, "self_attn.v_proj.weight", KvHeads);
        var attn = query.ScaledDotProductAttention(key, value, null, 0.0, true, null, true); // causal, grouped-query
        var h = x + attn.Transpose(1, 2).Reshape(new[] { Batch, Seq, Hidden }).Linear(w["self_attn.o_proj.weight"], null);
        norm = h.RmsNorm(new[] { Hidden }, w["post_attention_layernorm.weight"], Eps);
        var gate = norm.Linear(w["mlp.gate_proj.weight"], null).Silu();
        var up = norm.Linear(w["mlp.up_proj.weight"], null);
        return h + (gate * up).Linear(w["mlp.down_proj.weight"], null);
    }

    static int Main(string[] args)
    {
        string path = args.Length > 0 ? args[0] : "build/examples/llama_layer.safetensors";
        // The largest projection (hidden x intermediate) and its input and output activations,
        // and a quarter more; the layer's weights are about 2.5 times that.
        ulong largest = (ulong)(Hidden * Inter + Batch * Seq * (Hidden + Inter)) * 4;
        ulong budget = largest * 5 / 4;
        long live = torch.LiveHandles;
        double diff = 0;
        ulong peak;
        using (torch.NoGrad())
        using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, budget)))
        using (torch.NewDisposeScope())
        {
            var w = Weights.Load(path);
            float[] got = Layer(w["x"], w).ToArray<float>(), expected = w["expected"].ToArray<float>();
            if (got.Length != expected.Length) throw new Exception("the output's size differs from transformers'");
            for (int i = 0; i < got.Length; i++) diff = Math.Max(diff, Math.Abs((double)got[i] - expected[i]));
            peak = ResidencyManager.Stats.PeakDeviceBytes;
        }
        Console.WriteLine("budget {0} B, peak {1} B; largest difference from transformers: {2:0.00e+00}", budget, peak, diff);
        if (peak > budget || !(diff <= 1e-5) || torch.LiveHandles != live)
        {
            Console.WriteLine("FAILED: " + (peak > budget ? "over the budget" : torch.LiveHandles != live ? "handles left" : "differs from transformers"));
            return 1;
        }
        return 0;
    }
}
