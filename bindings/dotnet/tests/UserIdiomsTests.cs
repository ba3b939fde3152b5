// What users write, as in the Python and C++ suites (issue 13): integer scalars that keep an
// integer tensor integer and exact, `s / a` a true division, temporaries inside list arguments
// under every residency policy (releases are immediate there), a loop with no scope at all that
// stays within a bounded live count, and an event handler that calls back into the library, which
// must get an exception rather than deadlock (a watchdog ends the run instead of letting it hang).
using System;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using TensorRef;

namespace TensorRef.Tests
{
    static class UserIdiomsTests
    {
        [Test]
        static void IntegerScalars_KeepAnIntegerTensorIntegerAndExact()
        {
            using (torch.NewDisposeScope())
            {
                var idx = torch.Tensor(new long[] { 0, 1 });
                Check.Equal(DType.I64, (idx + 1).Dtype, "long tensor + 1");
                var emb = torch.Tensor(new float[] { 0, 1, 2, 3, 4, 5 }, 3, 2);
                Check.Values(new float[] { 2, 3, 4, 5 }, emb.IndexSelect(0, idx + 1), "an index computed with + 1");
                var big = torch.Tensor(new long[] { 1L << 60 });
                Check.Equal((1L << 60) + 1, (big + 1).ToArray<long>()[0], "2^60 + 1");
                Check.Equal((1L << 62) + 1, torch.Full(new long[] { 1 }, (1L << 62) + 1, DType.I64).ItemScalar().ToInt64(), "full");
                Check.Throws(Status.InvalidArg, () => torch.Full(new long[] { 1 }, double.PositiveInfinity, DType.I64), "inf into an I64 full");
                var odd = torch.Tensor(new long[] { (1L << 53) + 1 });
                Check.Equal(ScalarKind.Int, odd.ItemScalar().Kind, "an integer item");
                Check.Equal((1L << 53) + 1, odd.ItemScalar().ToInt64(), "exact beyond 2^53");
                Check.Equal(DType.F32, (idx + 0.5).Dtype, "a double still promotes");
                Check.Equal(DType.F32, (idx / 2).Dtype, "true division");
                Check.Equal(DType.Bool, torch.Tensor(new byte[] { 0, 1 }).ToDtype(DType.Bool).AddScalar(true).Dtype, "bool + true");
            }
        }

        [Test]
        static void ScalarOverTensor_IsPyTorchs()
        {
            using (torch.NewDisposeScope())
            {
                // PyTorch (and TorchSharp) compute s / t as t^-1 * s, some 1 ulp off the correctly
                // rounded quotient: the same results as without the library.
                var xs = Enumerable.Range(1, 1000).Select(i => i * 0.37f + 0.01f).ToArray();
                var want = xs.Select(x => (1.0f / x) * 3.0f).ToArray();
                var got = (3.0 / torch.Tensor(xs)).ToArray<float>();
                int off = got.Where((v, i) => v != want[i]).Count();
                Check.Equal(0, off, "elements of 3 / a that are not a^-1 * 3");
                Check.True((1.5 - torch.Tensor(xs)).ToArray<float>().SequenceEqual(xs.Select(x => 1.5f - x)), "1.5 - a");
            }
        }

        [Test]
        static void InPlaceScalarMethods_WriteIntoTheSameHandle()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Tensor(new float[] { 1, 2, 3 });
                var alias = a.Alias();
                Check.True(ReferenceEquals(a, a.AddScalar_(2).SubScalar_(0.5).DivScalar_(2).MulScalar_(4)), "each returns its receiver");
                Check.Values(new float[] { 5, 7, 9 }, alias, "the alias sees the writes");
            }
        }

        [Test]
        static void TemporariesInListArguments_LiveThroughTheCallUnderEveryPolicy()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Tensor(new float[] { 1, 2 });
                foreach (var policy in new[] { Policy.Resident, Policy.Genoa, Policy.Flow })
                {
                    using (ResidencyManager.Configure(new ResidencyConfig(policy, 1 << 20)))
                    {
                        for (int i = 0; i < 20; i++)
                        {
                            Check.Values(new float[] { 2, 3, 2, 4 }, torch.Stack(new[] { a + 1, a * 2 }, 0), "stack of temporaries, " + policy);
                            Check.Values(new float[] { 0, 1, -1, -2 }, torch.Cat(new[] { a - 1, -a }, 0), "cat of temporaries, " + policy);
                        }
                    }
                }
                Check.Throws(Status.InvalidArg, () => torch.Cat(new Tensor[0], 0), "an empty list");
            }
        }

        // Out of line, so that no stack slot of the loop keeps the step's objects reachable.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Step(Tensor w, Tensor x)
        {
            (x.Matmul(w).Relu() * 0.5 + 1.0).Sum();  // every temporary and the result dropped
        }

        // Mono scans stacks conservatively, so a collection may miss an object a stale stack word
        // still points to: the bound is one step's handles (five), not an exact count.
        [Test]
        static void ALoopWithNoScope_StaysAtABoundedLiveCount()
        {
            var w = torch.Randn(new long[] { 16, 16 });
            var x = torch.Randn(new long[] { 4, 16 });
            long start = torch.LiveHandles;
            var counts = new System.Collections.Generic.List<long>();
            // On a thread that then ends, so that no stack word of it keeps a step's objects.
            var loop = new Thread(() =>
            {
                for (int step = 0; step < 1000; step++)
                {
                    Step(w, x);
                    if (step % 100 == 99) counts.Add(Helpers.LiveAfterFinalizers(start) - start);
                }
            });
            loop.Start();
            loop.Join();
            Check.True(counts.All(n => n >= 0 && n <= 5),
                       "at most one step's handles outlive a collection, at every check (" + string.Join(", ", counts) + ")");
            Check.Equal(start, Helpers.LiveAfterFinalizers(start), "nothing of the loop is left once its thread is gone");
            w.Dispose();
            x.Dispose();
        }

        // The core's re-entrancy guard (src/residency) makes the handler's call an exception; without
        // it the call deadlocks on the manager's lock, and the watchdog ends the run.
        [Test]
        static void AHandlerThatCallsTheLibrary_GetsAnExceptionNotADeadlock()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Randn(new long[] { 8, 8 });
                int calls = 0;
                Action<ResidencyEvent> handler = e =>
                {
                    calls++;
                    torch.Ones(new long[] { 1 });  // throws: the manager is busy with this very op
                };
                ResidencyManager.TakeEventHandlerException();
                using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 64 * 1024)))
                {
                    ResidencyManager.Events += handler;
                    try
                    {
                        Tensor b = null;
                        var op = new Thread(() => { b = a.Matmul(a); });
                        op.Start();
                        if (!op.Join(TimeSpan.FromSeconds(60)))
                            Environment.FailFast("WATCHDOG: a handler calling torch.Ones did not return in 60 s (a deadlock?)");
                        Check.True(calls >= 1, "the handler ran");
                        Check.Equal("8,8", string.Join(",", b.Shape), "the op itself went on");
                        b.Dispose();
                        var error = ResidencyManager.TakeEventHandlerException();
                        Check.True(error is TensorRefException, "the handler's call failed with TensorRefException, got " +
                                   (error == null ? "nothing" : error.GetType().Name + ": " + error.Message));
                    }
                    finally
                    {
                        ResidencyManager.Events -= handler;
                    }
                }
            }
        }
    }
}
