// What the residency manager's event callback costs through .NET: a 4-element float add (and the
// release of its result) with no manager, under Flow on the simulated device, and under Flow with
// a C# ResidencyManager.Events handler subscribed, which the library reaches through the binding's
// reverse-P/Invoke trampoline for every event. Prints the median ns per op of 15 interleaved rounds
// and the handler's cost per event.
//
//   make bench-dotnet        (release build of the library)
using System;
using System.Diagnostics;
using System.Linq;
using TensorRef;

static class EventsBench
{
    const int Rounds = 15;

    static double Median(double[] xs) => xs.OrderBy(v => v).ElementAt(xs.Length / 2);

    static int Main(string[] args)
    {
        int iters = args.Length > 0 ? int.Parse(args[0]) : 20000;
        Console.WriteLine("4-element f32 add + release, {0} iterations x {1} rounds, median ns/op", iters, Rounds);
        var a = torch.Tensor(new float[] { 1, 2, 3, 4 });
        var b = torch.Tensor(new float[] { 1, 2, 3, 4 });
        long events = 0;
        Action<ResidencyEvent> count = e => events++;

        // variant: 0 no manager, 1 Flow, 2 Flow with a handler
        Func<int, double> round = variant =>
        {
            ResidencySession session = variant == 0 ? null : ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 1 << 20));
            if (variant == 2) ResidencyManager.Events += count;
            try
            {
                using (var warm = a + b) { } // a and b come to the device once, outside the timing
                var sw = Stopwatch.StartNew();
                for (int i = 0; i < iters; i++)
                    using (var c = a + b) { }
                return sw.Elapsed.TotalMilliseconds * 1e6 / iters;
            }
            finally
            {
                if (variant == 2) ResidencyManager.Events -= count;
                session?.Dispose();
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
        };

        var ns = new double[3][];
        for (int v = 0; v < 3; v++) { round(v); ns[v] = new double[Rounds]; } // warm-up
        events = 0;
        for (int r = 0; r < Rounds; r++)
            for (int v = 0; v < 3; v++)
                ns[v][r] = round(v);
        double perOp = events / (double)((long)Rounds * (iters + 1));
        double none = Median(ns[0]), flow = Median(ns[1]), handler = Median(ns[2]);
        Console.WriteLine("  no manager                          {0,8:F0} ns", none);
        Console.WriteLine("  Flow, simulated device              {0,8:F0} ns", flow);
        Console.WriteLine("  Flow + a C# Events handler          {0,8:F0} ns  ({1:F1} events per op)", handler, perOp);
        Console.WriteLine("handler cost: about {0:F0} ns per event (trampoline, event copy, delegate call)", (handler - flow) / perOp);
        a.Dispose();
        b.Dispose();
        return 0;
    }
}
