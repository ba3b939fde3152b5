// The two SafeHandle kinds of the binding: TensorHandle (tr_tensor) and ScopeHandle (tr_scope).
// A SafeHandle marshals as an IntPtr, which on 64-bit platforms is passed exactly like the C
// ABI's `struct { uint64_t id; }`, and the marshaller keeps it from being released while a call
// that uses it is in flight.
//
// Release rules:
// - Tensor.Dispose releases the handle's one reference (tr_tensor_release) at once.
// - The finalizer releases a tensor only if no scope owns it: an open scope still counts on its
//   members and releases them itself when disposed (TorchSharp's scopes keep their tensors
//   reachable for the same reason). A handle its scope already released is left alone.
// - A scope's handle disposes the scope (tr_scope_dispose, a no-op the second time).
// Releases may come from the finalizer thread in any order; the C ABI allows that.
using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace TensorRef
{
    /// <summary>Owns one reference to a tr_tensor.</summary>
    public sealed class TensorHandle : SafeHandle
    {
        /// <summary>The handle 0, passed where an optional tensor is absent.</summary>
        internal static readonly TensorHandle None = new TensorHandle(0, false);

        int _explicit;

        internal TensorHandle(ulong id, bool ownsHandle) : base(IntPtr.Zero, ownsHandle)
        {
            SetHandle((IntPtr)(long)id);
            Owning = ownsHandle;
        }

        /// <summary>False for the non-owning handle a disposed Tensor keeps (and for None).</summary>
        internal readonly bool Owning;

        public ulong Id => (ulong)(long)handle;

        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>Releases the reference now, whether or not a scope owns the handle.</summary>
        internal void ReleaseNow()
        {
            Interlocked.Exchange(ref _explicit, 1);
            Dispose();
        }

        protected override bool ReleaseHandle()
        {
            ulong id = Id;
            if (Volatile.Read(ref _explicit) == 0)
            {
                // Finalizer: leave the handle to its scope, or alone if it is already dead.
                ulong owner;
                if (Native.tr_tensor_scope(id, out owner) != Status.Ok || owner != 0)
                {
                    Interlocked.Increment(ref Diagnostics.finalizerSkips);
                    return true;
                }
                Interlocked.Increment(ref Diagnostics.finalizerReleases);
            }
            // TR_ERR_STALE_HANDLE here means a scope released it first: nothing left to do.
            Native.tr_tensor_release(id);
            return true;
        }
    }

    /// <summary>Owns a tr_scope: releasing it disposes the scope.</summary>
    public sealed class ScopeHandle : SafeHandle
    {
        internal ScopeHandle(ulong id, bool ownsHandle) : base(IntPtr.Zero, ownsHandle)
        {
            SetHandle((IntPtr)(long)id);
            Owning = ownsHandle;
        }

        /// <summary>False for the non-owning handle a disposed DisposeScope keeps.</summary>
        internal readonly bool Owning;

        public ulong Id => (ulong)(long)handle;

        public override bool IsInvalid => handle == IntPtr.Zero;

        protected override bool ReleaseHandle()
        {
            Native.tr_scope_dispose(Id);
            return true;
        }
    }

    /// <summary>
    /// The ids of a tensor array for one call (`const tr_tensor *, size_t`), with each SafeHandle
    /// held (DangerousAddRef) until disposed so no element is released during the call.
    /// </summary>
    internal struct HandleList : IDisposable
    {
        readonly TensorHandle[] _held;
        public readonly ulong[] Ids;

        /// <param name="optional">Whether an element may be null (the id 0: a list of optional tensors).</param>
        public HandleList(Tensor[] tensors, string name, bool optional = false)
        {
            if (tensors == null) throw new ArgumentNullException(name);
            Ids = new ulong[tensors.Length];
            _held = new TensorHandle[tensors.Length];
            try
            {
                for (int i = 0; i < tensors.Length; i++)
                {
                    if (optional && tensors[i] == null) continue;
                    var h = Tensor.Arg(tensors[i], name);
                    bool added = false;
                    h.DangerousAddRef(ref added);
                    _held[i] = h;
                    Ids[i] = h.Id;
                }
            }
            catch
            {
                Dispose();
                throw;
            }
        }

        public UIntPtr Length => (UIntPtr)Ids.Length;

        public void Dispose()
        {
            if (_held == null) return;
            for (int i = 0; i < _held.Length; i++)
            {
                if (_held[i] != null) _held[i].DangerousRelease();
                _held[i] = null;
            }
        }
    }

    /// <summary>Counters of the binding's own finalizer work, for leak hunting and tests.</summary>
    public static class Diagnostics
    {
        internal static long finalizerReleases;
        internal static long finalizerSkips;

        /// <summary>Tensors the finalizer released (no scope owned them).</summary>
        public static long FinalizerReleases => Interlocked.Read(ref finalizerReleases);

        /// <summary>Tensors the finalizer left to their scope (or found already released).</summary>
        public static long FinalizerSkips => Interlocked.Read(ref finalizerSkips);
    }
}
