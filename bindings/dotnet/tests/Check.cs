// Assertions for the tests (Check.*) and shared helpers: the spec's statistics tuples, waiting for
// finalizers, and the current scope's raw id.
using System;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using TensorRef;

namespace TensorRef.Tests
{
    sealed class CheckFailed : Exception
    {
        public CheckFailed(string message) : base(message) { }
    }

    static class Check
    {
        public static void True(bool cond, string what)
        {
            if (!cond) throw new CheckFailed("expected: " + what);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!Equals(expected, actual))
                throw new CheckFailed(what + ": expected " + expected + ", got " + actual);
        }

        public static void Near(double expected, double actual, double tol, string what)
        {
            if (!(Math.Abs(expected - actual) <= tol))
                throw new CheckFailed(what + ": expected " + expected + " ± " + tol + ", got " + actual);
        }

        public static void Values(float[] expected, Tensor t, string what)
        {
            var got = t.ToArray<float>();
            if (got.Length != expected.Length || got.Where((v, i) => Math.Abs(v - expected[i]) > 1e-5).Any())
                throw new CheckFailed(what + ": expected [" + string.Join(", ", expected) + "], got [" + string.Join(", ", got) + "]");
        }

        /// <summary>
        /// The spec's tuple (created_outside, disposed_outside, created_in, disposed_in, attached,
        /// detached, live) against this thread's statistics.
        /// </summary>
        public static void Stats(int co, int dout, int ci, int di, int att, int det, int live, string when)
        {
            var s = DisposeScopeManager.Statistics.Snapshot();
            string want = string.Format("({0},{1},{2},{3},{4},{5},{6})", co, dout, ci, di, att, det, live);
            if (s.ToString() != want)
                throw new CheckFailed("statistics " + when + ": expected " + want + ", got " + s);
            var st = DisposeScopeManager.Statistics;
            if (st.ThreadTotalLiveCount != live || st.CreatedInScopeCount != ci || st.DetachedFromScopeCount != det)
                throw new CheckFailed("the live Statistics view disagrees with its snapshot " + when);
        }

        /// <summary>Runs `f`, which must throw TensorRefException with `status`; returns it.</summary>
        public static TensorRefException Throws(Status status, Action f, string what)
        {
            try
            {
                f();
            }
            catch (TensorRefException e)
            {
                if (e.Status != status)
                    throw new CheckFailed(what + ": expected status " + status + ", got " + e.Status + " (" + e.Message + ")");
                if (string.IsNullOrEmpty(e.LibraryMessage))
                    throw new CheckFailed(what + ": the exception carries no tr_last_error message");
                return e;
            }
            throw new CheckFailed(what + ": expected TensorRefException(" + status + "), nothing was thrown");
        }

        public static T Throws<T>(Action f, string what) where T : Exception
        {
            try
            {
                f();
            }
            catch (T e)
            {
                return e;
            }
            catch (Exception e)
            {
                throw new CheckFailed(what + ": expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
            }
            throw new CheckFailed(what + ": expected " + typeof(T).Name + ", nothing was thrown");
        }
    }

    static class Helpers
    {
        [DllImport("tensorref")]
        static extern Status tr_scope_current(out ulong id);

        [DllImport("tensorref")]
        static extern Status tr_last_error(byte[] buf, UIntPtr len, out UIntPtr outLen);

        /// <summary>This thread's tr_last_error, read straight from the C ABI.</summary>
        public static string LastError()
        {
            var buf = new byte[4096];
            UIntPtr len;
            if (tr_last_error(buf, (UIntPtr)buf.Length, out len) != Status.Ok) throw new CheckFailed("tr_last_error failed");
            return System.Text.Encoding.UTF8.GetString(buf, 0, (int)len);
        }

        /// <summary>The raw id of this thread's current scope (0 for none), straight from the C ABI.</summary>
        public static ulong CurrentScopeId()
        {
            ulong id;
            if (tr_scope_current(out id) != Status.Ok) throw new CheckFailed("tr_scope_current failed");
            return id;
        }

        /// <summary>Collects and runs finalizers until tr_live_handles() reaches `target` (or 20 rounds).</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long LiveAfterFinalizers(long target)
        {
            long live = torch.LiveHandles;
            for (int i = 0; i < 20 && live != target; i++)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
                live = torch.LiveHandles;
            }
            return live;
        }

        public static Tensor Small() => torch.Zeros(new long[] { 2 });
    }
}
