// The .NET side of the residency API: sessions restore what was configured before them (nested,
// and disposed out of order); Configure copies its config; Events handlers stay subscribed across
// reconfiguration, are kept alive by the binding while subscribed (the GC may run at any time) and
// let go after; a handler's exception never reaches the op or native code; a handler calling the
// manager gets InvalidOperationException instead of a deadlock; events arrive on the op's thread.
using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Threading;
using TensorRef;

namespace TensorRef.Tests
{
    static class ResidencyApiTests
    {
        static ResidencyConfig Flow(ulong budget) => new ResidencyConfig(Policy.Flow, budget);

        /// <summary>A few ops that load, place results and (under a small budget) evict.</summary>
        static void SomeOps()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Randn(new long[] { 16, 16 });
                a.Matmul(a).Tanh().Add(a);
            }
        }

        [Test]
        static void DeviceMemory_PeakStaysWithinTheBudget_AndNothingIsLeftAfter()
        {
            const ulong budget = 3 * 16 * 16 * 4 + 512; // an op's two inputs and its result, and a little
            using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, budget)))
            {
                for (int i = 0; i < 8; i++)
                    SomeOps();
                var m = ResidencyManager.DeviceMemory();
                Check.True(m.Peak > 0 && m.Peak <= budget, $"the allocator's peak {m.Peak} is within the budget {budget}");
            }
            var after = ResidencyManager.DeviceMemory();
            Check.Equal(0UL, after.Live, "no device memory once the manager is off");
            Check.Equal(0UL, after.InFlight, "nothing in flight once the manager is off");
        }

        [Test]
        static void ScheduleModel_OfTheLastMarkedIteration_CountsWhatItMoved()
        {
            const ulong budget = 3 * 16 * 16 * 4 + 512;
            using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, budget)))
            {
                ResidencyManager.ScheduleLogStart();
                Check.Throws(Status.InvalidArg, () => ResidencyManager.ScheduleModel(), "ScheduleModel before an iteration was logged");
                ResidencyStats before = ResidencyManager.Stats;
                for (int i = 0; i < 3; i++)
                {
                    before = ResidencyManager.Stats;
                    for (int j = 0; j < 4; j++)
                        SomeOps();
                    ResidencyManager.MarkIteration();
                }
                var after = ResidencyManager.Stats;
                var model = ResidencyManager.ScheduleModel();
                Check.Equal(after.LoadBytes - before.LoadBytes, model.LoadedBytes, "the model loads what the counters say the iteration loaded");
                Check.True(model.UnmanagedSeconds > 0 && model.Slowdown >= 1.0, $"at least the unmanaged step: {model.StepSeconds} s against {model.UnmanagedSeconds} s");
            }
            Check.Throws(Status.InvalidArg, () => ResidencyManager.ScheduleModel(), "ScheduleModel without a manager");
        }

        [Test]
        static void Session_Using_RestoresThePreviousConfiguration()
        {
            using (ResidencyManager.Configure(Flow(1 << 20)))
            {
                using (var inner = ResidencyManager.Configure(new ResidencyConfig(Policy.Genoa, 1 << 16)))
                {
                    Check.Equal(Policy.Genoa, ResidencyManager.Current.Policy, "the inner configuration is current");
                    Check.Equal(1UL << 16, ResidencyManager.Stats.Budget, "the library runs the inner budget");
                    Check.Equal(Policy.Genoa, inner.Config.Policy, "the session's config");
                }
                Check.Equal(Policy.Flow, ResidencyManager.Current.Policy, "the outer configuration is back");
                Check.Equal(1UL << 20, ResidencyManager.Stats.Budget, "the library runs the outer budget again");

                ResidencyManager.Disable();
                Check.True(!ResidencyManager.Enabled, "Disable inside a session stops the manager");
                using (ResidencyManager.Configure(Flow(1 << 18))) { }
                Check.True(!ResidencyManager.Enabled, "a session opened while disabled restores 'disabled'");
            }
            Check.True(!ResidencyManager.Enabled && ResidencyManager.Current == null, "no manager after the outer session");

            var unbounded = new ResidencyConfig(Policy.Resident, 0);
            using (ResidencyManager.Configure(unbounded))
                Check.True(!ResidencyManager.Stats.IsBounded, "Resident keeps no budget");
        }

        [Test]
        static void Session_DisposedOutOfOrder_EndsTheSessionsOpenedAfterIt()
        {
            var outer = ResidencyManager.Configure(Flow(1 << 20));
            var inner = ResidencyManager.Configure(Flow(1 << 16));
            outer.Dispose();
            Check.True(outer.IsDisposed && inner.IsDisposed, "disposing the outer session ends the inner one too");
            Check.True(!ResidencyManager.Enabled, "back to what was before the outer session");
            using (ResidencyManager.Configure(Flow(1 << 18)))
            {
                inner.Dispose();
                outer.Dispose();
                Check.Equal(1UL << 18, ResidencyManager.Stats.Budget, "ended sessions' Dispose does nothing");
            }
        }

        [Test]
        static void Enabled_LeavesTheLastErrorAlone()
        {
            Check.Throws(Status.InvalidArg, () => ResidencyManager.MarkIteration(), "MarkIteration without a manager");
            string before = Helpers.LastError();
            Check.True(!ResidencyManager.Enabled, "no manager");
            Check.Equal(before, Helpers.LastError(), "tr_last_error after Enabled (tr_residency_enabled never sets it)");
            using (ResidencyManager.Configure(new ResidencyConfig(Policy.Flow, 1 << 20)))
                Check.True(ResidencyManager.Enabled, "a manager runs");
            Check.True(!ResidencyManager.Enabled, "off again after the session");
        }

        [Test]
        static void Configure_CopiesTheConfig()
        {
            var config = Flow(1 << 20);
            using (var session = ResidencyManager.Configure(config))
            {
                config.BudgetBytes = 5;
                config.Policy = Policy.Genoa;
                Check.Equal(1UL << 20, ResidencyManager.Current.BudgetBytes, "Current is unchanged");
                Check.Equal(Policy.Flow, session.Config.Policy, "so is the session's");
                Check.Equal(1UL << 20, ResidencyManager.Stats.Budget, "and the library's");
            }
            var d = new ResidencyConfig();
            Check.True(d.Device == Device.Simulated && d.Policy == Policy.Flow && d.PrefetchDepth == 256 &&
                       d.PinHostMemory && d.BudgetBytes == 0 && d.SimulatedCapacity == 0, "the library's defaults: " + d);
        }

        // ------------------------------------------------------------ events

        [Test]
        static void Events_SurviveReconfiguration_AndStopWhenUnsubscribed()
        {
            int calls = 0;
            Action<ResidencyEvent> count = e => calls++;
            ResidencyManager.Events += count; // before any manager: registered by Configure
            try
            {
                using (ResidencyManager.Configure(Flow(4096)))
                {
                    SomeOps();
                    Check.True(calls > 0, "events arrive from a manager configured after subscribing");
                    using (ResidencyManager.Configure(Flow(8192))) { }
                    calls = 0;
                    SomeOps();
                    Check.True(calls > 0, "and still after the manager was replaced twice");
                    ResidencyManager.Events -= count;
                    calls = 0;
                    SomeOps();
                    Check.Equal(0, calls, "no events after unsubscribing");
                }
            }
            finally
            {
                ResidencyManager.Events -= count;
            }
        }

        [Test]
        static void Events_HandlerExceptions_NeverReachTheOp()
        {
            ResidencyManager.TakeEventHandlerException();
            long thrown = ResidencyManager.EventHandlerExceptionCount;
            int after = 0;
            Action<ResidencyEvent> bad = e => { throw new ApplicationException("handler failed at " + e.Kind); };
            Action<ResidencyEvent> good = e => after++;
            ResidencyManager.Events += bad;
            ResidencyManager.Events += good;
            try
            {
                using (ResidencyManager.Configure(Flow(4096)))
                    SomeOps(); // would not return if an exception unwound through native code
            }
            finally
            {
                ResidencyManager.Events -= bad;
                ResidencyManager.Events -= good;
            }
            Check.True(after > 0, "the next handler still ran for every event");
            long n = ResidencyManager.EventHandlerExceptionCount - thrown;
            Check.Equal((long)after, n, "one caught exception per event");
            var first = ResidencyManager.TakeEventHandlerException();
            Check.True(first is ApplicationException && first.Message.StartsWith("handler failed"), "the first exception is kept: " + first);
            Check.True(ResidencyManager.TakeEventHandlerException() == null, "and taken once");
        }

        [Test]
        static void Events_HandlerCallingTheManager_GetsInvalidOperation_NotADeadlock()
        {
            ResidencyManager.TakeEventHandlerException();
            Action<ResidencyEvent> reentrant = e => { var s = ResidencyManager.Stats; };
            ResidencyManager.Events += reentrant;
            try
            {
                using (ResidencyManager.Configure(Flow(4096)))
                    SomeOps();
            }
            finally
            {
                ResidencyManager.Events -= reentrant;
            }
            var x = ResidencyManager.TakeEventHandlerException();
            Check.True(x is InvalidOperationException && x.Message.Contains("must not call libtensorref"),
                       "the handler's call was refused: " + x);
        }

        [Test]
        static void Events_ComeOnTheThreadOfTheOp()
        {
            var threads = new HashSet<int>();
            Action<ResidencyEvent> where = e => { lock (threads) threads.Add(Thread.CurrentThread.ManagedThreadId); };
            ResidencyManager.Events += where;
            int worker = 0;
            try
            {
                using (ResidencyManager.Configure(Flow(4096)))
                {
                    var th = new Thread(() => { worker = Thread.CurrentThread.ManagedThreadId; SomeOps(); });
                    th.Start();
                    th.Join();
                    Check.Equal(1, threads.Count, "only the worker has run ops so far");
                    SomeOps();
                }
            }
            finally
            {
                ResidencyManager.Events -= where;
            }
            Check.True(threads.Contains(worker), "the worker's ops reported on the worker's thread");
            Check.True(threads.Contains(Thread.CurrentThread.ManagedThreadId), "this thread's ops reported here");
        }

        sealed class Counter
        {
            public int Calls;
        }

        static Counter _counter;
        static WeakReference _handler;

        // Subscribing and unsubscribing on threads that then end, so no stack slot of this thread
        // can keep the handler reachable: only the binding holds it.
        static void OnThread(ThreadStart f)
        {
            var th = new Thread(f);
            th.Start();
            th.Join();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Subscribe()
        {
            var counter = _counter = new Counter();
            Action<ResidencyEvent> h = e => counter.Calls++;
            _handler = new WeakReference(h);
            ResidencyManager.Events += h;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Unsubscribe()
        {
            ResidencyManager.Events -= (Action<ResidencyEvent>)_handler.Target;
        }

        static void Collect()
        {
            for (int i = 0; i < 3; i++) { GC.Collect(); GC.WaitForPendingFinalizers(); }
        }

        [Test]
        static void Events_HandlerIsKeptAliveWhileSubscribed_AndLetGoAfter()
        {
            OnThread(Subscribe);
            try
            {
                Collect();
                Check.True(_handler.IsAlive, "the binding keeps a subscribed handler reachable");
                using (ResidencyManager.Configure(Flow(4096)))
                {
                    Collect();
                    SomeOps();
                }
                Check.True(_counter.Calls > 0, "events reached the handler after collections");
            }
            finally
            {
                OnThread(Unsubscribe);
            }
            Collect();
            Check.True(!_handler.IsAlive, "an unsubscribed handler is not kept");
        }
    }
}
