// MiniLM from C# on the real all-MiniLM-L6-v2: embeddings are unit length, a paraphrase pair is
// close (cosine > 0.5) and an unrelated pair is not (< 0.2); under Flow with a device budget of a
// quarter of the weights, page and chunk modes give embeddings identical to the unmanaged run
// with the peak device bytes (the manager's counter and every event's) within the budget, chunk
// pinning weights and loading fewer bytes than page. Errors arrive with the library's statuses,
// and a disposed model refuses calls. Each test loads the model once (about 90 MB).
using System;
using System.Linq;
using TensorRef;

namespace TensorRef.Tests
{
    static class MiniLMTests
    {
        static readonly string[] Sentences =
        {
            "A man is playing a guitar.",
            "Someone strums a guitar.",
            "The stock market fell sharply.",
        };

        static double Dot(float[] a, float[] b)
        {
            double s = 0;
            for (int i = 0; i < a.Length; i++) s += (double)a[i] * b[i];
            return s;
        }

        static MiniLM Load(int batchSize)
        {
            return MiniLM.Load(ModelFiles.Dir, new MiniLMOptions { BatchSize = batchSize });
        }

        [Test]
        static void Embeddings_AreUnitLengthAndParaphrasesClose()
        {
            var defaults = new MiniLMOptions();
            Check.Equal(WeightMode.Page, defaults.Mode, "the default weight mode");
            Check.Equal(256, defaults.MaxSeqLength, "the default max_seq_length");
            using (var m = Load(2)) // 3 sentences: a full batch and a partial one
            {
                Check.Equal(384, m.Dim, "Dim");
                long dataStart;
                WeightsTests.ReadHeader(ModelFiles.Safetensors, out dataStart);
                Check.Equal((ulong)(new System.IO.FileInfo(ModelFiles.Safetensors).Length - dataStart), m.WeightBytes,
                            "WeightBytes: the safetensors file's data section");
                var e = m.Embed(Sentences);
                Check.Equal(3, e.Length, "one embedding per sentence");
                foreach (var row in e)
                {
                    Check.Equal(384, row.Length, "an embedding's width");
                    Check.Near(1.0, Math.Sqrt(Dot(row, row)), 1e-5, "an embedding's norm");
                }
                double close = Dot(e[0], e[1]), far = Dot(e[0], e[2]);
                Console.WriteLine("     cosine: guitar/guitar {0:F4}, guitar/stocks {1:F4}", close, far);
                Check.True(close > 0.5, "the paraphrase pair is close: " + close);
                Check.True(far < 0.2, "the unrelated pair is not: " + far);
                var flat = m.EmbedFlat(Sentences[1]);
                double diff = flat.Select((v, i) => Math.Abs(v - e[1][i])).Max();
                Check.True(diff <= 1e-5, "a sentence alone embeds as in a padded batch (the mask hides the padding): max |diff| " + diff);
            }
        }

        sealed class Run
        {
            public float[] Embeddings;
            public ResidencyStats Stats;
            public ulong MaxEventDeviceBytes;
        }

        static Run Managed(MiniLM m, ulong budget)
        {
            var run = new Run();
            Action<ResidencyEvent> watch = e => { if (e.DeviceBytes > run.MaxEventDeviceBytes) run.MaxEventDeviceBytes = e.DeviceBytes; };
            ResidencyManager.Events += watch;
            try
            {
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, budget)))
                {
                    Check.True(ResidencyManager.Enabled, "the manager runs");
                    run.Embeddings = m.EmbedFlat(Sentences);
                    run.Stats = ResidencyManager.Stats;
                }
            }
            finally
            {
                ResidencyManager.Events -= watch;
            }
            var thrown = ResidencyManager.TakeEventHandlerException();
            if (thrown != null) throw thrown;
            return run;
        }

        [Test]
        static void PageAndChunk_UnderAQuarterBudget_MatchTheUnmanagedRun()
        {
            using (var m = Load(2))
            {
                var unmanaged = m.EmbedFlat(Sentences);
                ulong budget = m.WeightBytes / 4, capacity = budget / 2;
                var page = Managed(m, budget);
                m.SetWeightMode(WeightMode.Chunk, capacity);
                var chunk = Managed(m, budget);
                foreach (var r in new[] { Tuple.Create("page", page), Tuple.Create("chunk", chunk) })
                {
                    var s = r.Item2.Stats;
                    Console.WriteLine("     Flow {0,-5} budget {1} B: peak {2} B (events: {3} B), loaded {4} B, pinned {5} B, prefetch hits {6}",
                                      r.Item1, budget, s.PeakDeviceBytes, r.Item2.MaxEventDeviceBytes, s.LoadBytes, s.PinnedBytes, s.PrefetchHits);
                    Check.True(r.Item2.Embeddings.SequenceEqual(unmanaged), r.Item1 + ": embeddings identical to the unmanaged run");
                    Check.True(s.PeakDeviceBytes <= budget && s.PeakDeviceBytes > 0, r.Item1 + ": peak " + s.PeakDeviceBytes + " within the budget " + budget);
                    Check.True(r.Item2.MaxEventDeviceBytes <= budget, r.Item1 + ": device bytes within the budget at every event");
                    Check.True(s.Loads > 0, r.Item1 + ": weights were loaded onto the device");
                }
                Check.Equal(0UL, page.Stats.PinnedBytes, "page mode pins nothing");
                Check.True(chunk.Stats.PinnedBytes > 0 && chunk.Stats.PinnedBytes <= capacity,
                           "chunk mode pins up to its capacity: " + chunk.Stats.PinnedBytes);
                // Flow's learned order already keeps what is reused, so chunk's pins need not load
                // less (tests/minilm.rs compares the two under Genoa, which keeps nothing).
                Check.True(chunk.Stats.LoadBytes >= chunk.Stats.PinnedBytes, "chunk's pinned weights were loaded");
            }
        }

        [Test]
        static void Errors_CarryTheLibrarysStatus()
        {
            Check.Throws(Status.Io, () => MiniLM.Load("/nonexistent/minilm"), "a missing model folder");
            Check.Throws(Status.InvalidArg, () => MiniLM.Load(ModelFiles.Dir, new MiniLMOptions { BatchSize = 0 }), "batch size 0");
            Check.Throws(Status.InvalidArg, () => MiniLM.Load(ModelFiles.Dir, new MiniLMOptions { MaxSeqLength = 1 }), "max_seq_length 1");
            var m = Load(2);
            try
            {
                Check.Throws(Status.InvalidArg, () => m.Embed(), "no sentences");
                Check.Throws(Status.InvalidArg, () => m.SetWeightMode((WeightMode)7), "an unknown weight mode");
                Check.Throws<ArgumentNullException>(() => m.Embed("fine", null), "a null sentence");
                Check.Throws<ArgumentException>(() => m.Embed("nul\0inside"), "a sentence with a NUL");
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 1 << 20)))
                    Check.Throws(Status.BudgetTooSmall, () => m.Embed("too small a budget"), "a 1 MiB budget");
            }
            finally
            {
                m.Dispose();
            }
            Check.True(m.IsDisposed, "IsDisposed");
            Check.Throws<ObjectDisposedException>(() => m.Embed("after dispose"), "a disposed model");
            m.Dispose(); // a second Dispose does nothing
        }
    }
}
