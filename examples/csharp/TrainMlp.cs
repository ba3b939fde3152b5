// Trains a small MLP (2 -> 32 -> 1, tanh) to learn y = x0 * x1 with plain SGD, one
// `using (var d = torch.NewDisposeScope())` per step: every temporary of the forward pass, the
// loss and the gradients dies with the step's scope, so the number of live handles stays flat.
// Prints the loss and the live counts as it goes; exits 1 if the count ever drifts or the loss
// does not fall.
//
//   make test-dotnet   (builds and runs it)     or: mono build/dotnet/TrainMlp.exe [steps]
using System;
using TensorRef;

static class TrainMlp
{
    static int Main(string[] args)
    {
        int steps = args.Length > 0 ? int.Parse(args[0]) : 300;
        torch.ManualSeed(0);

        // Data and parameters are built in a scope too, so the temporaries of their expressions
        // die with it; the results are detached from it: the caller owns and disposes them.
        Tensor x, y, w1, b1, w2, b2;
        using (var init = torch.NewDisposeScope())
        {
            x = (torch.Rand(new long[] { 256, 2 }) * 2 - 1).DetachFromDisposeScope();
            y = (x.Narrow(1, 0, 1) * x.Narrow(1, 1, 1)).DetachFromDisposeScope();
            w1 = (torch.Randn(new long[] { 32, 2 }) * 0.5).RequiresGrad_(true).DetachFromDisposeScope();
            b1 = torch.Zeros(new long[] { 32 }).RequiresGrad_(true).DetachFromDisposeScope();
            w2 = (torch.Randn(new long[] { 1, 32 }) * 0.2).RequiresGrad_(true).DetachFromDisposeScope();
            b2 = torch.Zeros(new long[] { 1 }).RequiresGrad_(true).DetachFromDisposeScope();
        }
        var parameters = new[] { w1, b1, w2, b2 };

        long liveAtStart = -1, threadLiveAtStart = -1;
        double firstLoss = 0, loss = 0;
        bool flat = true;
        for (int step = 0; step < steps; step++)
        {
            using (var d = torch.NewDisposeScope())
            {
                var prediction = x.Linear(w1, b1).Tanh().Linear(w2, b2);
                var l = prediction.MseLoss(y);
                l.Backward();
                torch.OptimSgdStep(parameters, 0.2);
                foreach (var p in parameters) p.ZeroGrad();
                loss = l.Item();
                if (step == 0) firstLoss = loss;
                if (step % 50 == 0 || step == steps - 1)
                    Console.WriteLine("step {0,4}  loss {1:F5}  handles in this step's scope {2,3}", step, loss, d.DisposablesCount);
            }
            // After the scope: only data and parameters are left.
            long live = torch.LiveHandles, threadLive = DisposeScopeManager.Statistics.ThreadTotalLiveCount;
            if (step == 0)
            {
                liveAtStart = live;
                threadLiveAtStart = threadLive;
                Console.WriteLine("           live handles after each step: {0} (tr_live_handles), {1} (this thread's statistics)", live, threadLive);
            }
            else if (live != liveAtStart || threadLive != threadLiveAtStart)
            {
                Console.WriteLine("step {0}: live handles drifted to {1} / {2}", step, live, threadLive);
                flat = false;
            }
        }

        Console.WriteLine("live handles stayed at {0} for {1} steps: {2}", liveAtStart, steps, flat ? "flat" : "NOT flat");
        Console.WriteLine("loss {0:F5} -> {1:F5}", firstLoss, loss);
        foreach (var t in new[] { x, y, w1, b1, w2, b2 }) t.Dispose();
        Console.WriteLine("after disposing data and parameters: {0} live handles", torch.LiveHandles);

        bool learned = loss < firstLoss / 4;
        if (!learned) Console.WriteLine("the loss did not fall to a quarter");
        return flat && learned && torch.LiveHandles == 0 ? 0 : 1;
    }
}
