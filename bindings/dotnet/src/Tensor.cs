// Tensor: one reference to a libtensorref tensor handle, disposable. This file holds its lifecycle,
// its data (in and out) and its dispose-scope moves; the op methods are generated (Ops.g.cs) and
// the operators are in Operators.cs.
//
// A disposed Tensor keeps its (now dead) id in a non-owning handle, so using it reaches the
// library, which answers TR_ERR_STALE_HANDLE with its own message: the same error as for a tensor
// whose scope released it.
using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace TensorRef
{
    /// <summary>A reference-counted libtorch tensor handle. Dispose it, or let a dispose scope do it.</summary>
    public sealed partial class Tensor : IDisposable
    {
        TensorHandle _handle;      // null once disposed
        TensorHandle _ghost;       // a non-owning handle to the dead id, made on first use after Dispose
        readonly ulong _id;

        /// <summary>Takes ownership of a new handle the library returned (one reference).</summary>
        internal Tensor(ulong id)
        {
            _id = id;
            _handle = new TensorHandle(id, true);
        }

        /// <summary>
        /// The SafeHandle this tensor passes to the C ABI; after Dispose, a non-owning handle to the
        /// dead id (so calls reach the library and fail there with TR_ERR_STALE_HANDLE).
        /// </summary>
        public TensorHandle Handle => _handle ?? Ghost();

        TensorHandle Ghost()
        {
            if (_ghost == null) Interlocked.CompareExchange(ref _ghost, new TensorHandle(_id, false), null);
            return _ghost;
        }

        /// <summary>The raw tr_tensor id (slot and generation).</summary>
        public ulong Id => _id;

        /// <summary>Whether Dispose was called on this object.</summary>
        public bool IsDisposed => _handle == null;

        /// <summary>Whether the handle is still alive in the library (false once released by anyone).</summary>
        public bool IsValid
        {
            get
            {
                bool valid;
                Native.Check(Native.tr_tensor_is_valid(Handle, out valid), "tr_tensor_is_valid");
                return valid;
            }
        }

        /// <summary>
        /// Drops this tensor's reference (tr_tensor_release) and removes it from its scope. A second
        /// Dispose, or a Dispose after the scope released it, does nothing.
        /// </summary>
        public void Dispose()
        {
            var h = Interlocked.Exchange(ref _handle, null);
            if (h != null) h.ReleaseNow();
        }

        internal static TensorHandle Arg(Tensor t, string name)
        {
            if (t == null) throw new ArgumentNullException(name);
            return t.Handle;
        }

        internal static TensorHandle OptArg(Tensor t)
        {
            return t == null ? TensorHandle.None : t.Handle;
        }

        /// <summary>
        /// Takes ownership of the first <paramref name="n"/> handles an op wrote (a tuple or a list
        /// of results); an output the op did not make (the id 0) is null.
        /// </summary>
        internal static Tensor[] AdoptAll(ulong[] ids, int n)
        {
            var tensors = new Tensor[n];
            for (int i = 0; i < n; i++)
                tensors[i] = ids[i] == 0 ? null : new Tensor(ids[i]);
            return tensors;
        }

        // ------------------------------------------------------------ lifecycle

        /// <summary>A new handle to the same storage with its own life, owned by the current scope.</summary>
        public Tensor Alias()
        {
            ulong id;
            Native.Check(Native.tr_tensor_alias(Handle, out id), "tr_tensor_alias");
            return new Tensor(id);
        }

        // ------------------------------------------------------------ scopes

        /// <summary>Hands this tensor to the scope outside its owner (detached if none). Returns this.</summary>
        public Tensor MoveToOuterDisposeScope()
        {
            Native.Check(Native.tr_tensor_move_to_outer_scope(Handle), "tr_tensor_move_to_outer_scope");
            return this;
        }

        /// <summary>Takes this tensor out of its scope: the caller owns it now. Returns this.</summary>
        public Tensor DetachFromDisposeScope()
        {
            Native.Check(Native.tr_tensor_detach_from_scope(Handle), "tr_tensor_detach_from_scope");
            return this;
        }

        /// <summary>Hands this tensor to `scope`; null detaches it. Returns this.</summary>
        public Tensor MoveToOtherDisposeScope(DisposeScope scope)
        {
            var target = new ScopeHandle(scope == null ? 0 : scope.Id, false);
            Native.Check(Native.tr_tensor_move_to_scope(Handle, target), "tr_tensor_move_to_scope");
            return this;
        }

        /// <summary>Hands this tensor to the scope that owns `other` (detached if none does). Returns this.</summary>
        public Tensor MoveToOtherDisposeScope(Tensor other)
        {
            ulong target;
            Native.Check(Native.tr_tensor_scope(Arg(other, "other"), out target), "tr_tensor_scope");
            Native.Check(Native.tr_tensor_move_to_scope(Handle, new ScopeHandle(target, false)),
                         "tr_tensor_move_to_scope");
            return this;
        }

        /// <summary>The open DisposeScope that owns this tensor, or null.</summary>
        public DisposeScope OwningDisposeScope
        {
            get
            {
                ulong id;
                Native.Check(Native.tr_tensor_scope(Handle, out id), "tr_tensor_scope");
                return DisposeScope.Find(id);
            }
        }

        // ------------------------------------------------------------ data

        /// <summary>The sizes of each dimension.</summary>
        public long[] Shape
        {
            get
            {
                var dims = new long[8];
                UIntPtr ndim;
                var status = Native.tr_tensor_shape(Handle, dims, (UIntPtr)dims.Length, out ndim);
                if (status == Status.BufferTooSmall)
                {
                    dims = new long[(int)ndim];
                    status = Native.tr_tensor_shape(Handle, dims, (UIntPtr)dims.Length, out ndim);
                }
                Native.Check(status, "tr_tensor_shape");
                Array.Resize(ref dims, (int)ndim);
                return dims;
            }
        }

        public DType Dtype
        {
            get
            {
                DType d;
                Native.Check(Native.tr_tensor_dtype(Handle, out d), "tr_tensor_dtype");
                return d;
            }
        }

        public long Numel
        {
            get
            {
                UIntPtr n;
                Native.Check(Native.tr_tensor_numel(Handle, out n), "tr_tensor_numel");
                return (long)(ulong)n;
            }
        }

        void Where(out TensorRef.Device device, out int index)
        {
            Native.Check(Native.tr_tensor_device(Handle, out device, out index), "tr_tensor_device");
        }

        /// <summary>Where the memory is: Device.Cpu (host memory) or Device.Cuda (DeviceIndex says which).</summary>
        public TensorRef.Device DeviceType
        {
            get
            {
                TensorRef.Device d;
                int n;
                Where(out d, out n);
                return d;
            }
        }

        /// <summary>The CUDA device number of a tensor on Device.Cuda; 0 for host memory.</summary>
        public int DeviceIndex
        {
            get
            {
                TensorRef.Device d;
                int n;
                Where(out d, out n);
                return n;
            }
        }

        /// <summary>"cpu" or "cuda:n", as TorchSharp and PyTorch name devices.</summary>
        public string Device
        {
            get
            {
                TensorRef.Device d;
                int n;
                Where(out d, out n);
                return d == TensorRef.Device.Cuda ? "cuda:" + n : "cpu";
            }
        }

        /// <summary>The value of a one-element tensor, as a double.</summary>
        public double Item()
        {
            double v;
            Native.Check(Native.tr_tensor_item(Handle, out v), "tr_tensor_item");
            return v;
        }

        /// <summary>
        /// The value of a one-element tensor typed by its dtype: an integer (exact to 64 bits, where
        /// Item() rounds beyond 2^53), a bool or a double.
        /// </summary>
        public Scalar ItemScalar()
        {
            Scalar v;
            Native.Check(Native.tr_tensor_item_scalar(Handle, out v), "tr_tensor_item_scalar");
            return v;
        }

        /// <summary>The elements, row-major. T must match the dtype (float for F32, long for I64...).</summary>
        public T[] ToArray<T>() where T : struct
        {
            var want = DTypes.Of<T>();
            var have = Dtype;
            if (have != want)
                throw new ArgumentException(string.Format("ToArray<{0}> on a {1} tensor: convert with ToDtype(DType.{2}) first",
                                                          typeof(T).Name, have, want));
            var data = new T[Numel];
            var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            try
            {
                UIntPtr written;
                var bytes = (UIntPtr)((ulong)data.Length * (ulong)Marshal.SizeOf(typeof(T)));
                Native.Check(Native.tr_tensor_copy_to(Handle, pin.AddrOfPinnedObject(), bytes, out written), "tr_tensor_copy_to");
            }
            finally
            {
                pin.Free();
            }
            return data;
        }

        /// <summary>A new tensor holding a copy of `data` in the given shape (row-major).</summary>
        internal static Tensor FromData<T>(T[] data, long[] shape) where T : struct
        {
            if (data == null) throw new ArgumentNullException("data");
            if (shape == null) shape = new long[] { data.Length };
            var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            try
            {
                ulong id;
                var bytes = (UIntPtr)((ulong)data.Length * (ulong)Marshal.SizeOf(typeof(T)));
                Native.Check(Native.tr_tensor_from_data(pin.AddrOfPinnedObject(), bytes, shape, (UIntPtr)shape.Length,
                                                        DTypes.Of<T>(), out id), "tr_tensor_from_data");
                return new Tensor(id);
            }
            finally
            {
                pin.Free();
            }
        }

        public override string ToString()
        {
            if (IsDisposed) return "Tensor(disposed)";
            try
            {
                return string.Format("Tensor([{0}], {1})", string.Join(", ", Shape), Dtype);
            }
            catch (TensorRefException e)
            {
                return "Tensor(" + e.Status + ")";
            }
        }
    }

    /// <summary>The dtype of each C# element type the binding copies in and out.</summary>
    static class DTypes
    {
        internal static DType Of<T>()
        {
            var t = typeof(T);
            if (t == typeof(float)) return DType.F32;
            if (t == typeof(double)) return DType.F64;
            if (t == typeof(long)) return DType.I64;
            if (t == typeof(int)) return DType.I32;
            if (t == typeof(short)) return DType.I16;
            if (t == typeof(sbyte)) return DType.I8;
            if (t == typeof(byte)) return DType.U8;
            throw new ArgumentException("no tensor dtype for element type " + t.Name);
        }
    }
}
