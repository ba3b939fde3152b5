// Dispose scopes with TorchSharp's names: torch.NewDisposeScope() opens one for a `using` block;
// every tensor created on this thread while it is the innermost open scope belongs to it and is
// released when it is disposed. The library keeps the membership (one registry for every
// language); this class is a thin owner of the scope handle.
//
// Open scopes are held strongly in a table until disposed, so a forgotten scope object is never
// finalized while it is still capturing tensors. (When its thread exits, the library disposes the
// scopes the thread left open.)
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;

namespace TensorRef
{
    /// <summary>A dispose scope: owns the tensors created on its thread while it is current.</summary>
    public sealed class DisposeScope : IDisposable
    {
        static readonly ConcurrentDictionary<ulong, DisposeScope> Open = new ConcurrentDictionary<ulong, DisposeScope>();

        ScopeHandle _handle;

        internal DisposeScope(ulong id)
        {
            _handle = new ScopeHandle(id, true);
            Open[id] = this;
        }

        /// <summary>Opens a scope on this thread and makes it current.</summary>
        internal static DisposeScope New()
        {
            ulong id;
            Native.Check(Native.tr_scope_new(out id), "tr_scope_new");
            return new DisposeScope(id);
        }

        /// <summary>The open DisposeScope with this id, or null.</summary>
        internal static DisposeScope Find(ulong id)
        {
            DisposeScope s;
            return id != 0 && Open.TryGetValue(id, out s) ? s : null;
        }

        /// <summary>The raw tr_scope id.</summary>
        public ulong Id => _handle.Id;

        /// <summary>The SafeHandle this scope passes to the C ABI.</summary>
        public ScopeHandle Handle => _handle;

        /// <summary>Whether the scope is disposed (by Dispose, or by the library when its thread ended).</summary>
        public bool IsDisposed
        {
            get
            {
                UIntPtr n;
                return Native.tr_scope_len(_handle, out n) == Status.ScopeDisposed;
            }
        }

        /// <summary>The number of tensors the scope owns.</summary>
        public long DisposablesCount
        {
            get
            {
                UIntPtr n;
                Native.Check(Native.tr_scope_len(_handle, out n), "tr_scope_len");
                return (long)(ulong)n;
            }
        }

        /// <summary>Whether the scope owns `t` (by handle identity).</summary>
        public bool Contains(Tensor t)
        {
            bool owned;
            Native.Check(Native.tr_scope_contains(_handle, Tensor.Arg(t, "t"), out owned), "tr_scope_contains");
            return owned;
        }

        /// <summary>Takes ownership of `t`, from another scope or from the caller. Returns `t`.</summary>
        public Tensor Attach(Tensor t)
        {
            Native.Check(Native.tr_scope_attach(_handle, Tensor.Arg(t, "t")), "tr_scope_attach");
            return t;
        }

        public void Attach(params Tensor[] tensors)
        {
            foreach (var t in tensors) Attach(t);
        }

        /// <summary>If the scope owns `t`, `t` leaves it and belongs to the caller. Returns `t`.</summary>
        public Tensor Detach(Tensor t)
        {
            Native.Check(Native.tr_scope_detach(_handle, Tensor.Arg(t, "t")), "tr_scope_detach");
            return t;
        }

        public void Detach(params Tensor[] tensors)
        {
            foreach (var t in tensors) Detach(t);
        }

        /// <summary>If the scope owns `t`, hands it to the outer scope (detached if none). Returns `t`.</summary>
        public Tensor MoveToOuter(Tensor t)
        {
            Native.Check(Native.tr_scope_move_to_outer(_handle, Tensor.Arg(t, "t")), "tr_scope_move_to_outer");
            return t;
        }

        public void MoveToOuter(params Tensor[] tensors)
        {
            foreach (var t in tensors) MoveToOuter(t);
        }

        /// <summary>If this scope owns `t`, hands it to `scope` (null detaches it). Returns `t`.</summary>
        public Tensor MoveToOther(DisposeScope scope, Tensor t)
        {
            return Contains(t) ? t.MoveToOtherDisposeScope(scope) : t;
        }

        /// <summary>Releases every tensor the scope owns; the scope stays open and keeps capturing.</summary>
        public void DisposeEverything()
        {
            Native.Check(Native.tr_scope_dispose_everything(_handle), "tr_scope_dispose_everything");
        }

        /// <summary>
        /// Releases every owned tensor except those in `keep`, which stay owned and die with the
        /// scope. Tensors in `keep` that the scope does not own are left alone.
        /// </summary>
        public void DisposeEverythingBut(params Tensor[] keep)
        {
            using (var ids = new HandleList(keep, "keep"))
                Native.Check(Native.tr_scope_dispose_everything_but(_handle, ids.Ids, ids.Length),
                             "tr_scope_dispose_everything_but");
        }

        public void DisposeEverythingBut(IEnumerable<Tensor> keep)
        {
            DisposeEverythingBut(keep.ToArray());
        }

        /// <summary>Releases every owned tensor and closes the scope (out of order too). A second call does nothing.</summary>
        public void Dispose()
        {
            var h = _handle;
            if (!h.Owning) return;
            var ghost = new ScopeHandle(h.Id, false);
            if (Interlocked.CompareExchange(ref _handle, ghost, h) != h) return;
            h.Dispose();
            DisposeScope removed;
            Open.TryRemove(h.Id, out removed);
        }

        public override string ToString()
        {
            return string.Format("DisposeScope({0:x})", Id);
        }
    }

    /// <summary>This thread's scope statistics (TorchSharp's DisposeScopeManager.Statistics).</summary>
    public static class DisposeScopeManager
    {
        /// <summary>A live view of the calling thread's counters.</summary>
        public static ThreadDisposeScopeStatistics Statistics { get; } = new ThreadDisposeScopeStatistics();

        /// <summary>This thread's innermost open scope, or null.</summary>
        public static DisposeScope CurrentDisposeScope
        {
            get
            {
                ulong id;
                Native.Check(Native.tr_scope_current(out id), "tr_scope_current");
                return DisposeScope.Find(id);
            }
        }
    }

    /// <summary>The calling thread's counters; every property reads them afresh (tr_scope_stats_get).</summary>
    public sealed class ThreadDisposeScopeStatistics
    {
        internal ThreadDisposeScopeStatistics() { }

        public long CreatedOutsideScopeCount => (long)Snapshot().CreatedOutsideScope;
        public long DisposedOutsideScopeCount => (long)Snapshot().DisposedOutsideScope;
        public long CreatedInScopeCount => (long)Snapshot().CreatedInScope;
        public long DisposedInScopeCount => (long)Snapshot().DisposedInScope;
        public long AttachedToScopeCount => (long)Snapshot().AttachedToScope;
        public long DetachedFromScopeCount => (long)Snapshot().DetachedFromScope;

        /// <summary>(created in − disposed in) + (created outside − disposed outside), this thread.</summary>
        public long ThreadTotalLiveCount => Snapshot().Live;

        /// <summary>Zeroes the calling thread's counters.</summary>
        public void Reset()
        {
            Native.Check(Native.tr_scope_stats_reset(), "tr_scope_stats_reset");
        }

        /// <summary>All counters at once.</summary>
        public ScopeStats Snapshot()
        {
            NativeStats s;
            Native.Check(Native.tr_scope_stats_get(out s), "tr_scope_stats_get");
            return new ScopeStats(s);
        }

        public override string ToString() => Snapshot().ToString();
    }

    /// <summary>A copy of one thread's counters at one moment.</summary>
    public struct ScopeStats : IEquatable<ScopeStats>
    {
        internal ScopeStats(NativeStats s)
        {
            CreatedOutsideScope = s.CreatedOutsideScope;
            DisposedOutsideScope = s.DisposedOutsideScope;
            CreatedInScope = s.CreatedInScope;
            DisposedInScope = s.DisposedInScope;
            AttachedToScope = s.AttachedToScope;
            DetachedFromScope = s.DetachedFromScope;
            Live = s.Live;
        }

        public ulong CreatedOutsideScope { get; }
        public ulong DisposedOutsideScope { get; }
        public ulong CreatedInScope { get; }
        public ulong DisposedInScope { get; }
        public ulong AttachedToScope { get; }
        public ulong DetachedFromScope { get; }
        public long Live { get; }

        public bool Equals(ScopeStats o) =>
            CreatedOutsideScope == o.CreatedOutsideScope && DisposedOutsideScope == o.DisposedOutsideScope &&
            CreatedInScope == o.CreatedInScope && DisposedInScope == o.DisposedInScope &&
            AttachedToScope == o.AttachedToScope && DetachedFromScope == o.DetachedFromScope && Live == o.Live;

        public override bool Equals(object o) => o is ScopeStats && Equals((ScopeStats)o);

        public override int GetHashCode() => (int)(CreatedInScope * 31 + CreatedOutsideScope) ^ (int)Live;

        /// <summary>The spec's tuple order: (created_outside, disposed_outside, created_in, disposed_in, attached, detached, live).</summary>
        public override string ToString() =>
            string.Format("({0},{1},{2},{3},{4},{5},{6})", CreatedOutsideScope, DisposedOutsideScope, CreatedInScope,
                          DisposedInScope, AttachedToScope, DetachedFromScope, Live);
    }
}
