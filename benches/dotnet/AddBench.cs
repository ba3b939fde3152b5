// The .NET binding's overhead on a tiny op: a 4-element float add through C# (Mono), against the
// same add called from C directly (add_loop.c, in the same process), printed as a ratio. Also
// shown: the add in a dispose scope (results released by the scope, 1000 at a time) and a bare
// P/Invoke on raw ids (no SafeHandle, no Tensor object), which splits the overhead into its parts.
// Each figure is the median of 15 interleaved rounds, after a warm-up.
//
//   make bench-dotnet        (release build of the library)
using System;
using System.Diagnostics;
using System.Linq;
using System.Runtime.InteropServices;
using TensorRef;

static class AddBench
{
    [DllImport("trbench_add")]
    static extern double trbench_c_add_ns(ulong iters);

    [DllImport("tensorref", EntryPoint = "tr_tensor_add")]
    static extern Status RawAdd(ulong a, ulong b, out ulong result);

    [DllImport("tensorref", EntryPoint = "tr_tensor_release")]
    static extern Status RawRelease(ulong t);

    const int Rounds = 15;

    /// <summary>
    /// ns per iteration, including the collection and finalizers of the garbage the round made,
    /// so that work is charged to the variant that caused it, not to the next one.
    /// </summary>
    static double Time(int iters, Action<int> body)
    {
        var sw = Stopwatch.StartNew();
        body(iters);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        return sw.Elapsed.TotalMilliseconds * 1e6 / iters;
    }

    static double Median(double[] xs)
    {
        var sorted = xs.OrderBy(v => v).ToArray();
        return sorted[sorted.Length / 2];
    }

    static int Main(string[] args)
    {
        int iters = args.Length > 0 ? int.Parse(args[0]) : 50000;
        Console.WriteLine(torch.Version);
        Console.WriteLine("4-element f32 add + release of the result, {0} iterations x {1} rounds, median ns/op", iters, Rounds);

        var a = torch.Tensor(new float[] { 1, 2, 3, 4 });
        var b = torch.Tensor(new float[] { 1, 2, 3, 4 });
        using (var c = a + b)
            if (c.ToArray<float>()[3] != 8) { Console.WriteLine("wrong result"); return 1; }

        ulong ra = a.Id, rb = b.Id;
        var variants = new Func<double>[]
        {
            // C, direct
            () => trbench_c_add_ns((ulong)iters),
            // C#, bare P/Invoke on raw ids
            () => Time(iters, n =>
            {
                for (int i = 0; i < n; i++)
                {
                    ulong c;
                    if (RawAdd(ra, rb, out c) != Status.Ok || RawRelease(c) != Status.Ok) throw new Exception("raw add failed");
                }
            }),
            // C#, the binding: operator + and Dispose
            () => Time(iters, n =>
            {
                for (int i = 0; i < n; i++)
                    using (var c = a + b) { }
            }),
            // C#, the binding: results released by a scope, 1000 per scope
            () => Time(iters, n =>
            {
                for (int i = 0; i < n; i += 1000)
                    using (torch.NewDisposeScope())
                        for (int j = 0; j < 1000; j++) GC.KeepAlive(a + b);
            }),
        };
        // Rounds interleave the variants, so a load change on a shared machine hits all of them;
        // the ratio is the median of the per-round ratios.
        var ns = new double[variants.Length][];
        for (int v = 0; v < variants.Length; v++) { variants[v](); ns[v] = new double[Rounds]; }  // warm-up
        for (int r = 0; r < Rounds; r++)
            for (int v = 0; v < variants.Length; v++)
                ns[v][r] = variants[v]();
        if (ns[0].Any(x => x < 0)) { Console.WriteLine("the C loop failed with status " + (-ns[0].Min())); return 1; }
        double cNs = Median(ns[0]), rawNs = Median(ns[1]), csNs = Median(ns[2]), scopeNs = Median(ns[3]);
        var ratios = ns[2].Select((x, r) => x / ns[0][r]).OrderBy(x => x).ToArray();
        double ratio = Median(ratios), q1 = ratios[Rounds / 4], q3 = ratios[3 * Rounds / 4];

        Console.WriteLine("  C, direct (tr_tensor_add + tr_tensor_release)        {0,8:F0} ns", cNs);
        Console.WriteLine("  C#, bare P/Invoke on raw ids                          {0,8:F0} ns  ({1:F2}x C)", rawNs, rawNs / cNs);
        Console.WriteLine("  C#, using (var c = a + b) {{}}                          {0,8:F0} ns  ({1:F2}x C)", csNs, csNs / cNs);
        Console.WriteLine("  C#, var c = a + b in a dispose scope (1000 per scope) {0,8:F0} ns  ({1:F2}x C)", scopeNs, scopeNs / cNs);
        Console.WriteLine("ratio C#/C: {0:F2} (median of per-round ratios, quartiles {1:F2}-{2:F2}; binding overhead about {3:F0} ns per op)",
                          ratio, q1, q3, csNs - cNs);
        a.Dispose();
        b.Dispose();
        return 0;
    }
}
