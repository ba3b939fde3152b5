// Runs a stack of linear layers whose weights are 4x the device budget under the residency
// manager's Flow policy on the simulated device. Each forward pass is marked as an iteration
// (ResidencyManager.MarkIteration): the first records the access order, after which Flow evicts
// the weight needed furthest ahead and prefetches the next ones. Prints each pass's traffic, the
// manager's statistics and Genoa's traffic on the same stack for comparison. Exits 1 if an output
// differs from the unmanaged one, the device bytes at any event pass the budget, no prefetch hit,
// or a handle leaks.
//
//   make test-dotnet   (builds and runs it)
//   mono build/dotnet/FlowStack.exe [layers 16] [width 256] [batch 384] [passes 5]
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using TensorRef;

static class FlowStack
{
    static int layers = 16, width = 256, batch = 384, passes = 5;

    static string MiB(ulong bytes) => string.Format("{0:F2} MiB", bytes / 1048576.0);

    /// <summary>One forward pass: linear, then relu + linear per layer; its temporaries die with its scope.</summary>
    static float[] Forward(Tensor x, Tensor[] w, Tensor[] b)
    {
        using (torch.NewDisposeScope())
        {
            var h = x.Linear(w[0], b[0]);
            for (int i = 1; i < w.Length; i++)
            {
                var a = h.Relu();
                h.Dispose(); // dead before the next op, so Flow never writes it back
                h = a.Linear(w[i], b[i]);
                a.Dispose();
            }
            return h.ToArray<float>();
        }
    }

    static int Main(string[] argv)
    {
        // [--device simulated|cuda] [layers [width [batch [passes]]]]
        var device = Device.Simulated;
        var args = new List<string>(argv);
        int at = args.IndexOf("--device");
        if (at >= 0 && at + 1 < args.Count)
        {
            device = args[at + 1] == "cuda" ? Device.Cuda : Device.Simulated;
            args.RemoveRange(at, 2);
        }
        if (args.Count > 0) layers = int.Parse(args[0]);
        if (args.Count > 1) width = int.Parse(args[1]);
        if (args.Count > 2) batch = int.Parse(args[2]);
        if (args.Count > 3) passes = int.Parse(args[3]);
        long liveAtStart = torch.LiveHandles;
        torch.ManualSeed(0);

        var w = new Tensor[layers];
        var b = new Tensor[layers];
        Tensor x;
        using (torch.NewDisposeScope())
        {
            for (int i = 0; i < layers; i++)
            {
                w[i] = torch.Randn(new long[] { width, width }).MulScalar(1.0 / Math.Sqrt(width)).DetachFromDisposeScope();
                b[i] = torch.Zeros(new long[] { width }).DetachFromDisposeScope();
            }
            x = torch.Randn(new long[] { batch, width }).DetachFromDisposeScope();
        }
        ulong weightBytes = (ulong)layers * (ulong)(width * width + width) * 4;
        ulong budget = weightBytes / 4;
        Console.WriteLine("{0} linear layers of {1}x{1} f32 ({2} of weights), batch {3}; running on the {4} device, budget {5} (weights / 4)",
                          layers, width, MiB(weightBytes), batch, device == Device.Cuda ? "CUDA" : "simulated", MiB(budget));

        var reference = Forward(x, w, b);
        bool ok = true, identical = true;

        // Every event's device bytes, watched from the callback (it runs with the manager locked:
        // it only records).
        ulong fullest = 0;
        Action<ResidencyEvent> watch = e => { if (e.DeviceBytes > fullest) fullest = e.DeviceBytes; };
        ResidencyManager.Events += watch;

        ulong genoaPerPass = 0, flowPerPass = 0;
        ResidencyStats flow = default(ResidencyStats);
        foreach (var policy in new[] { Policy.Genoa, Policy.Flow })
        {
            Console.WriteLine(policy == Policy.Genoa
                ? "\nGenoa (every op loads its inputs and sends everything back; it never prefetches):"
                : "\nFlow (results stay; evicts by the recorded trace and prefetches the next weights):");
            Console.WriteLine("  pass    ms   loads      loaded  evictions  prefetch hits/misses");
            using (ResidencyManager.Configure(new ResidencyConfig(policy, budget) { Device = device }))
            {
                for (int pass = 0; pass < passes; pass++)
                {
                    var before = ResidencyManager.Stats;
                    var clock = Stopwatch.StartNew();
                    var output = Forward(x, w, b);
                    ResidencyManager.MarkIteration();
                    double ms = clock.Elapsed.TotalMilliseconds;
                    var after = ResidencyManager.Stats;
                    // Bit for bit on the simulated device; CUDA's kernels round differently.
                    if (device == Device.Simulated ? !output.SequenceEqual(reference)
                                                            : output.Zip(reference, (a, r) => Math.Abs(a - r)).Max() > 1e-4)
                    {
                        Console.WriteLine("  pass {0}: the output differs from the unmanaged run", pass);
                        identical = ok = false;
                    }
                    Console.WriteLine("  {0,4} {1,5:F0} {2,7} {3,11} {4,10} {5,10}/{6}{7}", pass, ms, after.Loads - before.Loads,
                                      MiB(after.LoadBytes - before.LoadBytes), after.Evictions - before.Evictions,
                                      after.PrefetchHits - before.PrefetchHits, after.PrefetchMisses - before.PrefetchMisses,
                                      pass == 0 && policy == Policy.Flow ? "   (records the trace)" : "");
                    if (policy == Policy.Genoa) genoaPerPass = after.LoadBytes - before.LoadBytes;
                    else flowPerPass = after.LoadBytes - before.LoadBytes;
                }
                if (policy == Policy.Flow) flow = ResidencyManager.Stats;
            }
        }
        ResidencyManager.Events -= watch;

        Console.WriteLine("\nFlow statistics over {0} passes:", passes);
        Console.WriteLine("  ops              {0}", flow.Ops);
        Console.WriteLine("  loads            {0} ({1}), {2} of them prefetches ({3})", flow.Loads, MiB(flow.LoadBytes), flow.Prefetches, MiB(flow.PrefetchBytes));
        Console.WriteLine("  evictions        {0} ({1})", flow.Evictions, MiB(flow.EvictedBytes));
        Console.WriteLine("  write-backs      {0} ({1})", flow.WriteBacks, MiB(flow.WriteBackBytes));
        Console.WriteLine("  prefetch         {0} hits, {1} misses", flow.PrefetchHits, flow.PrefetchMisses);
        Console.WriteLine("  transfer wait    {0:F1} ms", flow.TransferWait.TotalMilliseconds);
        Console.WriteLine("  peak device      {0} of the {1} budget ({2:P0}); fullest event seen {3}",
                          MiB(flow.PeakDeviceBytes), MiB(flow.Budget), flow.PeakDeviceBytes / (double)flow.Budget, MiB(fullest));
        Console.WriteLine("Last pass loaded {0} under Flow, {1} under Genoa: {2:F1}x less", MiB(flowPerPass), MiB(genoaPerPass),
                          genoaPerPass / (double)Math.Max(1UL, flowPerPass));

        if (fullest > budget || flow.PeakDeviceBytes > budget)
        {
            Console.WriteLine("the device bytes passed the budget");
            ok = false;
        }
        if (flow.PrefetchHits == 0)
        {
            Console.WriteLine("Flow never found a prefetched weight");
            ok = false;
        }
        foreach (var t in w.Concat(b).Concat(new[] { x })) t.Dispose();
        long live = torch.LiveHandles;
        Console.WriteLine("outputs identical to the unmanaged run: {0}; live handles back to {1} (started at {2})",
                          identical ? "yes" : "NO", live, liveAtStart);
        return ok && live == liveAtStart ? 0 : 1;
    }
}
