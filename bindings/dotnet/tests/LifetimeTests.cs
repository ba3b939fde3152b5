// Lifetimes the garbage collector decides: the finalizer releases tensors no scope owns, leaves
// scope-owned ones to their scope, and never disposes a scope that is still open. Handles cross
// threads (made on one, released on another); a thread's open scopes die with it.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using TensorRef;

namespace TensorRef.Tests
{
    static class LifetimeTests
    {
        const int N = 200;

        [Test]
        static void Finalizer_ReleasesUnownedTensors()
        {
            long live = torch.LiveHandles;
            long released = Diagnostics.FinalizerReleases;
            // Made on a thread that then ends, so no stack slot can keep them reachable.
            var th = new Thread(() => { for (int i = 0; i < N; i++) Helpers.Small(); });
            th.Start();
            th.Join();
            Check.Equal(live + N, torch.LiveHandles, "the dropped tensors are still live before a collection");
            Check.Equal(live, Helpers.LiveAfterFinalizers(live), "live handles after GC and finalizers");
            Check.True(Diagnostics.FinalizerReleases - released >= N, "the finalizer released them all");
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void DropInScope()
        {
            for (int i = 0; i < N; i++) Helpers.Small();
        }

        [Test]
        static void Finalizer_LeavesScopeOwnedTensorsToTheScope()
        {
            long live = torch.LiveHandles;
            long skipped = Diagnostics.FinalizerSkips;
            using (var d = torch.NewDisposeScope())
            {
                DropInScope();
                for (int i = 0; i < 3; i++) { GC.Collect(); GC.WaitForPendingFinalizers(); }
                Check.True(Diagnostics.FinalizerSkips - skipped >= N * 9 / 10,
                           "the finalizer ran on the dropped objects (" + (Diagnostics.FinalizerSkips - skipped) + " of " + N + ")");
                Check.Equal((long)N, d.DisposablesCount, "the scope still owns every one");
                Check.Equal(live + N, torch.LiveHandles, "all still live");
            }
            Check.Equal(live, torch.LiveHandles, "the scope released them");
            Check.Stats(0, 0, N, N, 0, 0, 0, "all counted on this thread");
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static ulong OpenAndForget()
        {
            return torch.NewDisposeScope().Id;
        }

        [Test]
        static void Finalizer_NeverDisposesAnOpenScope()
        {
            ulong id = OpenAndForget();
            for (int i = 0; i < 3; i++) { GC.Collect(); GC.WaitForPendingFinalizers(); }
            var d = DisposeScopeManager.CurrentDisposeScope;
            Check.True(d != null && d.Id == id, "the forgotten scope is still open and current");
            var t = Helpers.Small();
            Check.True(d.Contains(t), "and still capturing");
            d.Dispose();
            Check.True(!t.IsValid, "disposing it released its tensor");
        }

        [Test]
        static void Handles_CrossThreads()
        {
            Tensor made = null;
            var th = new Thread(() => { made = torch.Tensor(new float[] { 1, 2, 3 }); });
            th.Start();
            th.Join();
            Check.True(made.IsValid, "a tensor made on another thread (outside any scope) outlives it");
            var doubled = made * 2;
            Check.Values(new float[] { 2, 4, 6 }, doubled, "usable here");
            doubled.Dispose();
            made.Dispose();
            Check.True(!made.IsValid, "released from this thread");
            Check.Stats(1, 2, 0, 0, 0, 0, -1, "both disposes count here, one creation on the other thread");
        }

        [Test]
        static void ThreadExit_DisposesTheScopesItLeftOpen()
        {
            DisposeScope left = null;
            Tensor t = null;
            var th = new Thread(() =>
            {
                left = torch.NewDisposeScope();
                t = Helpers.Small();
            });
            th.Start();
            th.Join();
            Check.True(!t.IsValid, "the tensor of the thread's open scope was released when the thread ended");
            Check.True(left.IsDisposed, "the scope is disposed");
            left.Dispose();  // harmless
        }

        [DllImport("tensorref")]
        static extern Status tr_tensor_retain(ulong t);

        [DllImport("tensorref")]
        static extern Status tr_tensor_release(ulong t);

        [Test]
        static void ConcurrentDispose_FromManyThreads_ReleasesEachOnce()
        {
            var ts = new Tensor[64];
            for (int i = 0; i < ts.Length; i++)
            {
                ts[i] = Helpers.Small();
                Check.Equal(Status.Ok, tr_tensor_retain(ts[i].Id), "a second reference, held from C");
            }
            var threads = new Thread[4];
            for (int k = 0; k < threads.Length; k++)
            {
                threads[k] = new Thread(() => { foreach (var t in ts) t.Dispose(); });
                threads[k].Start();
            }
            foreach (var th in threads) th.Join();
            foreach (var t in ts)
            {
                Check.True(t.IsDisposed, "disposed");
                Check.Equal(Status.Ok, tr_tensor_release(t.Id), "the C reference is still there: four Disposes dropped one");
            }
        }
    }
}
