// The residency manager through the .NET binding, on the simulated device: Genoa and Flow give the
// unmanaged results bit for bit at budgets from the smallest feasible up; the device bytes at every
// event stay within the budget; Flow learns a marked iteration and prefetches; a too-small budget,
// an over-budget pin, a bad configuration and calls without a manager fail with the library's
// status and message; the timeline is Chrome trace JSON. The runner checks that each test leaves
// the live handle count where it was and the manager off.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using TensorRef;

namespace TensorRef.Tests
{
    static class ResidencyTests
    {
        const long Rows = 48, Width = 32;
        const ulong Act = Rows * Width * 4;   // one activation: 6 KiB
        const ulong Least = 3 * Act;          // the largest working set: Mul's two inputs and its output

        static byte[] Bytes(Tensor t)
        {
            var f = t.ToArray<float>();
            var b = new byte[f.Length * 4];
            Buffer.BlockCopy(f, 0, b, 0, b.Length);
            return b;
        }

        /// <summary>
        /// A fixed program over seeded random values: four layers of matmul, tanh, softmax, mul, add,
        /// an in-place add and transposes made contiguous, every intermediate kept alive so a tight
        /// budget forces evictions and write-backs. Returns each value's bytes.
        /// </summary>
        static List<byte[]> Program()
        {
            using (torch.NewDisposeScope())
            {
                torch.ManualSeed(7);
                var h = torch.Randn(new long[] { Rows, Width });
                var all = new List<Tensor> { h };
                for (int layer = 0; layer < 4; layer++)
                {
                    var w = torch.Randn(new long[] { Width, Width }).MulScalar(0.2);
                    var z = h.Matmul(w);
                    var a = z.Tanh();
                    var s = a.Softmax(1);
                    var m = s.Mul(z).Add(h);
                    m.Add_(a); // in place: written on the device
                    var t = m.Transpose(0, 1).Contiguous();
                    h = t.Transpose(0, 1).Contiguous().MulScalar(0.5).Relu();
                    all.AddRange(new[] { w, z, a, s, m, t, h });
                }
                return all.Select(Bytes).ToList();
            }
        }

        static void SameBytes(List<byte[]> expected, List<byte[]> got, string what)
        {
            Check.Equal(expected.Count, got.Count, what + ": value count");
            for (int i = 0; i < expected.Count; i++)
                Check.True(expected[i].SequenceEqual(got[i]), what + ": value " + i + " is bit for bit the unmanaged one");
        }

        [Test]
        static void GenoaAndFlow_GiveTheUnmanagedResults_BitForBit()
        {
            Check.True(!ResidencyManager.Enabled, "no manager for the reference run");
            var expected = Program();
            foreach (var policy in new[] { Policy.Genoa, Policy.Flow })
                foreach (var budget in new[] { Least, Least * 3 / 2, Least * 3 })
                {
                    string what = policy + " at " + budget + " bytes";
                    using (ResidencyManager.Configure(new ResidencyConfig(policy, budget)))
                    {
                        SameBytes(expected, Program(), what);
                        var s = ResidencyManager.Stats;
                        Check.True(s.Loads > 0 && s.Evictions > 0 && s.WriteBacks > 0, what + ": data moved both ways: " + s);
                        Check.True(s.PeakDeviceBytes <= budget, what + ": peak within the budget: " + s);
                        Check.Equal(0UL, s.DeviceBytes, what + ": the scope's releases freed every device byte");
                    }
                }
        }

        [Test]
        static void DeviceBytes_AtEveryEvent_StayWithinTheBudget()
        {
            foreach (var policy in new[] { Policy.Genoa, Policy.Flow })
            {
                var counts = new Dictionary<EventKind, int>();
                ulong most = 0;
                Action<ResidencyEvent> watch = e =>
                {
                    int n;
                    counts.TryGetValue(e.Kind, out n);
                    counts[e.Kind] = n + 1;
                    most = Math.Max(most, e.DeviceBytes);
                };
                ResidencyManager.Events += watch;
                try
                {
                    using (ResidencyManager.Configure(new ResidencyConfig(policy, Least)))
                    {
                        Program();
                        var s = ResidencyManager.Stats;
                        Func<EventKind, int> count = k => counts.ContainsKey(k) ? counts[k] : 0;
                        string seen = policy + ": " + string.Join(", ", counts.Select(kv => kv.Key + " " + kv.Value));
                        Check.True(count(EventKind.Load) > 0 && count(EventKind.Evict) > 0 &&
                                   count(EventKind.WriteBack) > 0, "loads, evictions and write-backs were reported: " + seen);
                        Check.Equal(count(EventKind.OpBegin), count(EventKind.OpEnd), seen + ": every op began and ended");
                        Check.Equal((ulong)(count(EventKind.Load) + count(EventKind.Prefetch)), s.Loads,
                                    policy + ": one Load or Prefetch event per load counted");
                        Check.True(most <= Least, policy + ": device bytes at the fullest event " + most + " <= budget " + Least);
                        Check.True(most <= s.PeakDeviceBytes, policy + ": no event above the reported peak");
                    }
                }
                finally
                {
                    ResidencyManager.Events -= watch;
                }
            }
        }

        // ------------------------------------------------------------ Flow follows a marked iteration

        /// <summary>16 layers of 4 KiB: the weights are 4x a 16 KiB budget, which one layer's matmul fills exactly.</summary>
        static float[] Pass(Tensor x, Tensor[] weights)
        {
            using (torch.NewDisposeScope())
            {
                var h = x.Matmul(weights[0]);
                for (int i = 1; i < weights.Length; i++)
                {
                    var z = h.Matmul(weights[i]);
                    h.Dispose(); // dead before the next op, so it is never written back
                    h = z.Tanh();
                    z.Dispose();
                }
                return h.ToArray<float>();
            }
        }

        [Test]
        static void Flow_AfterAMarkedIteration_PrefetchesAndLoadsLessThanGenoa()
        {
            using (torch.NewDisposeScope())
            {
                torch.ManualSeed(3);
                var weights = Enumerable.Range(0, 16).Select(_ => torch.Randn(new long[] { Width, Width }).MulScalar(0.2)).ToArray();
                var x = torch.Randn(new long[] { Rows, Width });
                var reference = Pass(x, weights);
                ulong budget = 16 * Width * Width * 4 / 4;
                var lastPass = new Dictionary<Policy, ulong>();
                foreach (var policy in new[] { Policy.Genoa, Policy.Flow })
                    using (ResidencyManager.Configure(new ResidencyConfig(policy, budget)))
                    {
                        for (int pass = 0; pass < 3; pass++)
                        {
                            ulong before = ResidencyManager.Stats.LoadBytes;
                            Check.True(reference.SequenceEqual(Pass(x, weights)), policy + " pass " + pass + " gives the unmanaged output");
                            ResidencyManager.MarkIteration();
                            lastPass[policy] = ResidencyManager.Stats.LoadBytes - before;
                        }
                        var s = ResidencyManager.Stats;
                        Check.True(s.PeakDeviceBytes <= budget, policy + ": within the budget: " + s);
                        if (policy == Policy.Flow)
                            Check.True(s.Prefetches > 0 && s.PrefetchHits > 0, "Flow prefetched weights ahead of use: " + s);
                    }
                Check.True(lastPass[Policy.Flow] * 2 <= lastPass[Policy.Genoa],
                           "Flow loads at most half of Genoa's bytes per pass: " + lastPass[Policy.Flow] + " vs " + lastPass[Policy.Genoa]);
            }
        }

        // ------------------------------------------------------------ documented failures

        [Test]
        static void BudgetTooSmall_NamesTheOp_AndLosesNothing()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Randn(new long[] { 64, 64 }); // 16 KiB each
                var b = torch.Randn(new long[] { 64, 64 });
                var expected = Bytes(a.Matmul(b));
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 20000)))
                {
                    long live = torch.LiveHandles;
                    var e = Check.Throws(Status.BudgetTooSmall, () => a.Matmul(b), "a matmul of 48 KiB under a 20000-byte budget");
                    Check.Equal("tr_tensor_matmul", e.Function, "the failing C function");
                    Check.True(e.LibraryMessage.Contains("`matmul` needs") && e.LibraryMessage.Contains("20000"),
                               "the library's message names the op and the budget: " + e.LibraryMessage);
                    Check.Equal(live, torch.LiveHandles, "the failed op left no handle");
                }
                Check.True(expected.SequenceEqual(Bytes(a.Matmul(b))), "the inputs are intact after the failure");
            }
        }

        [Test]
        static void Pins_CountAgainstTheBudget_AndStayResident()
        {
            using (torch.NewDisposeScope())
            {
                var big = torch.Randn(new long[] { 80, 64 });    // 20 KiB
                var pinned = torch.Randn(new long[] { 32, 32 }); // 4 KiB
                var x = torch.Randn(new long[] { 32, 32 });
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 16 << 10)))
                {
                    var e = Check.Throws(Status.BudgetTooSmall, () => big.PinResident(), "pinning 20 KiB under a 16 KiB budget");
                    Check.True(e.LibraryMessage.Contains("pin_resident"), "the message names pin_resident: " + e.LibraryMessage);
                    Check.True(!big.IsResident, "the refused pin loaded nothing");
                    Check.True(ReferenceEquals(pinned, pinned.PinResident()), "PinResident returns the tensor");
                    Check.True(pinned.IsResident, "a pinned tensor is loaded at once");
                    var h = x.Add(pinned);
                    for (int i = 0; i < 12; i++) h = h.Matmul(x).Tanh().Add(pinned); // all kept: the budget forces evictions
                    var s = ResidencyManager.Stats;
                    Check.Equal(4096UL, s.PinnedBytes, "pinned bytes");
                    Check.True(s.Evictions > 0, "the rest was evicted around the pin: " + s);
                    Check.True(pinned.IsResident, "the pinned tensor was never evicted");
                    pinned.PinResident(false);
                    Check.Equal(0UL, ResidencyManager.Stats.PinnedBytes, "unpinned");
                }
            }
        }

        [Test]
        static void Configure_BadConfigurations_AreRefused_AndChangeNothing()
        {
            var zero = Check.Throws(Status.InvalidArg, () => ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 0)),
                                    "Flow without a budget");
            Check.True(zero.LibraryMessage.Contains("budget"), "the message says why: " + zero.LibraryMessage);
            var policy = new ResidencyConfig(Policy.Flow, 1 << 20) { Policy = (Policy)7 };
            Check.True(Check.Throws(Status.InvalidArg, () => ResidencyManager.Configure(policy), "policy 7").LibraryMessage.Contains("policy 7"),
                       "the unknown policy is named");
            var cuda = new ResidencyConfig(Policy.Flow, 1 << 20) { Device = Device.Cuda, DeviceIndex = 99 };
            Check.Throws(Status.Device, () => ResidencyManager.Configure(cuda), "CUDA device 99");
            Check.Throws<ArgumentOutOfRangeException>(() => new ResidencyConfig { PrefetchDepth = -1 }, "a negative prefetch depth");
            Check.Throws<ArgumentNullException>(() => ResidencyManager.Configure(null), "no config");
            Check.True(!ResidencyManager.Enabled && ResidencyManager.Current == null, "nothing was configured");
        }

        [Test]
        static void WithoutAManager_ResidencyCallsAreInvalidArg()
        {
            var t = Helpers.Small();
            try
            {
                ResidencyManager.Disable(); // nothing to do: not an error
                var calls = new Dictionary<string, Action>
                {
                    { "Stats", () => { var s = ResidencyManager.Stats; } },
                    { "MarkIteration", ResidencyManager.MarkIteration },
                    { "TimelineStart", ResidencyManager.TimelineStart },
                    { "TimelineWrite", () => ResidencyManager.TimelineWrite(Path.Combine(Path.GetTempPath(), "tensorref-never-written.json")) },
                    { "PinResident", () => t.PinResident() },
                    { "IsResident", () => { var r = t.IsResident; } },
                };
                foreach (var call in calls)
                {
                    var e = Check.Throws(Status.InvalidArg, call.Value, call.Key + " without a manager");
                    Check.True(e.LibraryMessage.Contains("no residency manager"), call.Key + ": " + e.LibraryMessage);
                }
            }
            finally
            {
                t.Dispose();
            }
        }

        // The losses of a seeded 4-32-1 MLP trained for 8 steps as users write it: the update
        // p -= 0.1 * grad under NoGrad, the gradients zeroed, everything in one dispose scope.
        static List<double> TrainMlp()
        {
            var losses = new List<double>();
            using (torch.NewDisposeScope())
            {
                torch.ManualSeed(7);
                var x = torch.Randn(new long[] { 64, 4 });
                var y = (x.SumDim(new long[] { 1 }, true) * 0.5).Tanh();
                var ps = new[]
                {
                    (torch.Randn(new long[] { 32, 4 }) * 0.5).RequiresGrad_(true),
                    torch.Zeros(new long[] { 32 }).RequiresGrad_(true),
                    (torch.Randn(new long[] { 1, 32 }) * 0.5).RequiresGrad_(true),
                    torch.Zeros(new long[] { 1 }).RequiresGrad_(true),
                };
                for (int step = 0; step < 8; step++)
                {
                    var loss = x.Linear(ps[0], ps[1]).Relu().Dropout(0.1, true).Linear(ps[2], ps[3]).MseLoss(y);
                    loss.Backward();
                    using (torch.NoGrad())
                    {
                        foreach (var p in ps)
                        {
                            p.Sub_(p.Grad() * 0.1);
                            p.ZeroGrad();
                        }
                    }
                    losses.Add(loss.Item());
                }
            }
            return losses;
        }

        [Test]
        static void Training_ThroughTheManager_GivesTheLossesOfTrainingWithoutIt()
        {
            var plain = TrainMlp();
            Check.True(plain[plain.Count - 1] < plain[0], "the loss fell");
            foreach (var policy in new[] { Policy.Resident, Policy.Genoa, Policy.Flow })
            foreach (var recompute in new[] { Recompute.Off, Recompute.Always })
            {
                // The largest op: an 8 KiB activation in, 8 KiB out; backward's largest node holds
                // an 8 KiB saved tensor, the 8 KiB gradient it receives and the 8 KiB it makes, and
                // more while it makes a dropped input again.
                const ulong budget = 40 << 10;
                var what = policy + ", recomputation " + recompute;
                using (ResidencyManager.Configure(new ResidencyConfig(policy, budget) { Recompute = recompute }))
                {
                    Check.True(ResidencyManager.SavedTensorsManaged, what + ": saved tensors go through the manager");
                    ResidencyManager.DeviceMemory(resetPeak: true);
                    var managed = TrainMlp();
                    for (int i = 0; i < plain.Count; i++)
                        Check.Equal(plain[i], managed[i], what + ": the loss of step " + (i + 1));
                    var stats = ResidencyManager.Stats;
                    if (policy != Policy.Resident)
                    {
                        Check.True(stats.PeakDeviceBytes <= budget, what + ": within the budget");
                        Check.True(ResidencyManager.DeviceMemory().Peak <= budget, what + ": within the budget, as the allocator counts");
                    }
                    Check.Equal(policy != Policy.Resident && recompute == Recompute.Always, stats.Recomputations > 0, what + ": results made again");
                }
                Check.True(!ResidencyManager.SavedTensorsManaged, "not without a manager");
            }
        }

        // ------------------------------------------------------------ timeline

        [Test]
        static void Timeline_IsChromeTraceJson()
        {
            var path = Path.Combine(Path.GetTempPath(), "tensorref-dotnet-timeline-" + Guid.NewGuid().ToString("N") + ".json");
            using (torch.NewDisposeScope())
            {
                var a = torch.Randn(new long[] { 16, 16 });
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 4096)))
                {
                    var e = Check.Throws(Status.InvalidArg, () => ResidencyManager.TimelineWrite(path), "a timeline never started");
                    Check.True(e.LibraryMessage.Contains("timeline"), e.LibraryMessage);
                    ResidencyManager.TimelineStart();
                    a.Matmul(a).Relu();
                    ResidencyManager.TimelineWrite(path);
                    Check.Throws(Status.Io, () => ResidencyManager.TimelineWrite(Path.Combine(path, "no", "such", "dir.json")),
                                 "an unwritable path");
                }
            }
            string text;
            try { text = File.ReadAllText(path); }
            finally { File.Delete(path); }

            var root = (Dictionary<string, object>)MiniJson.Parse(text);
            Check.Equal("ms", root["displayTimeUnit"] as string, "displayTimeUnit");
            var events = ((List<object>)root["traceEvents"]).Cast<Dictionary<string, object>>().ToList();
            var phases = events.Select(ev => (string)ev["ph"]).ToList();
            Check.True(phases.All(p => "MBEXC".Contains(p)), "every event has a Chrome trace phase: " + string.Join("", phases.Distinct()));
            Check.True(events.Where(ev => (string)ev["ph"] != "M").All(ev => ev["ts"] is double), "every timed event has a numeric ts");
            Check.Equal(phases.Count(p => p == "B"), phases.Count(p => p == "E"), "op begins and ends pair up");
            var names = new HashSet<string>(events.Where(ev => ev.ContainsKey("name")).Select(ev => (string)ev["name"]));
            foreach (var name in new[] { "matmul", "relu", "Load", "device bytes" })
                Check.True(names.Contains(name), "an event named " + name + " (have: " + string.Join(", ", names) + ")");
            var counters = events.Where(ev => (string)ev["ph"] == "C").Select(ev => (double)((Dictionary<string, object>)ev["args"])["bytes"]);
            Check.True(counters.All(b => b <= 4096), "the device-bytes counter never passes the 4096-byte budget");
        }
    }
}
