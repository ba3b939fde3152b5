// The hand-written P/Invoke declarations of libtensorref's C ABI (include/tensorref.h): versions,
// errors, tensor lifecycle and data, dispose scopes, statistics, the residency manager (with its
// structs and callback type), weights files and the MiniLM model. The op functions are in the
// generated half of this class (Ops.g.cs), the constants in Abi.g.cs.
//
// Loading: [DllImport("tensorref")] resolves to libtensorref.so through the platform loader, so
// the library's folder must be on LD_LIBRARY_PATH (mk/dotnet.mk sets it to target/debug). That
// works for Mono and for the .NET SDK alike; no Mono-only dllmap config is needed.
//
// The static constructor checks the library's ABI version against the header this binding was
// generated from and refuses a mismatch before any other call is made.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace TensorRef
{
    /// <summary>Per-thread scope statistics, as the C struct tr_stats.</summary>
    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeStats
    {
        public ulong CreatedOutsideScope;
        public ulong DisposedOutsideScope;
        public ulong CreatedInScope;
        public ulong DisposedInScope;
        public ulong AttachedToScope;
        public ulong DetachedFromScope;
        public long Live;
    }

    internal static partial class Native
    {
        internal const string Lib = "tensorref";

        static Native()
        {
            uint found;
            try
            {
                found = tr_abi_version();
            }
            catch (DllNotFoundException e)
            {
                throw new LibraryLoadException(
                    "libtensorref could not be loaded: put the folder holding libtensorref.so on " +
                    "LD_LIBRARY_PATH (" + e.Message + ")", e);
            }
            catch (EntryPointNotFoundException e)
            {
                throw new LibraryLoadException(
                    "the loaded libtensorref has no tr_abi_version: it is not libtensorref, or far too old", e);
            }
            if (found != AbiVersion)
            {
                throw new LibraryLoadException(string.Format(
                    "libtensorref ABI mismatch: this .NET binding was generated for ABI {0} " +
                    "(include/tensorref.h {1}), but the loaded library reports ABI {2} ({3}). " +
                    "Load the library this binding was built with, or regenerate the binding " +
                    "(python3 tools/gen_ops.py) against the library's header.",
                    AbiVersion, HeaderVersion, found, VersionText()));
            }
        }

        /// <summary>Throws a TensorRefException for any status but Ok.</summary>
        internal static void Check(Status status, string function)
        {
            if (status != Status.Ok)
                throw Error(status, function);
        }

        internal static TensorRefException Error(Status status, string function)
        {
            return new TensorRefException(status, function, LastError());
        }

        /// <summary>The calling thread's last error message (tr_last_error).</summary>
        internal static string LastError()
        {
            UIntPtr len;
            if (tr_last_error(null, UIntPtr.Zero, out len) != Status.Ok && len == UIntPtr.Zero)
                return "";
            var buf = new byte[(int)len + 1];
            if (tr_last_error(buf, (UIntPtr)buf.Length, out len) != Status.Ok)
                return "";
            return Encoding.UTF8.GetString(buf, 0, (int)len);
        }

        internal static string StatusText(Status status)
        {
            return Marshal.PtrToStringAnsi(tr_status_str((int)status));
        }

        /// <summary>tr_version's text; callable before the ABI check has passed.</summary>
        static string VersionText()
        {
            try { return Marshal.PtrToStringAnsi(tr_version()); }
            catch (EntryPointNotFoundException) { return "no tr_version"; }
        }

        // ------------------------------------------------------------ versions and errors

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern uint tr_abi_version();

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern IntPtr tr_version();

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern IntPtr tr_status_str(int code);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_last_error(byte[] buf, UIntPtr len, out UIntPtr out_len);

        // ------------------------------------------------------------ tensor lifecycle

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_alias(TensorHandle t, out ulong result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_is_valid(TensorHandle t, [MarshalAs(UnmanagedType.I1)] out bool result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_scope(TensorHandle t, out ulong result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern UIntPtr tr_live_handles();

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern ulong tr_live_bytes(int device);

        // Raw forms on the bare id, for TensorHandle.ReleaseHandle only: a SafeHandle cannot be
        // marshalled while it is being released.
        [DllImport(Lib, EntryPoint = "tr_tensor_release", ExactSpelling = true)]
        internal static extern Status tr_tensor_release_raw(ulong t);

        [DllImport(Lib, EntryPoint = "tr_tensor_scope", ExactSpelling = true)]
        internal static extern Status tr_tensor_scope_raw(ulong t, out ulong result);

        [DllImport(Lib, EntryPoint = "tr_scope_dispose", ExactSpelling = true)]
        internal static extern Status tr_scope_dispose_raw(ulong s);

        /// <summary>Releases every id under one lock (0 skipped); reports the first bad one.</summary>
        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_release_many(ulong[] handles, UIntPtr len);

        // ------------------------------------------------------------ tensor data

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_from_data(IntPtr data, UIntPtr len, long[] shape, UIntPtr ndim,
                                                          DType dtype, out ulong result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_copy_to(TensorHandle t, IntPtr buf, UIntPtr len, out UIntPtr written);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_shape(TensorHandle t, long[] dims, UIntPtr len, out UIntPtr ndim);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_dtype(TensorHandle t, out DType result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_numel(TensorHandle t, out UIntPtr result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_item(TensorHandle t, out double result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_item_scalar(TensorHandle t, out Scalar result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_device(TensorHandle t, out int result);

        // ------------------------------------------------------------ scopes

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_new(out ulong result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_dispose_everything(ScopeHandle s);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_dispose_everything_but(ScopeHandle s, ulong[] keep, UIntPtr keep_len);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_attach(ScopeHandle s, TensorHandle t);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_detach(ScopeHandle s, TensorHandle t);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_move_to_outer(ScopeHandle s, TensorHandle t);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_contains(ScopeHandle s, TensorHandle t, [MarshalAs(UnmanagedType.I1)] out bool result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_len(ScopeHandle s, out UIntPtr result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_current(out ulong result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_move_to_outer_scope(TensorHandle t);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_detach_from_scope(TensorHandle t);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_move_to_scope(TensorHandle t, ulong target);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_stats_get(out NativeStats result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_scope_stats_reset();

        // ------------------------------------------------------------ global state

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_manual_seed(ulong seed);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_grad_set_enabled([MarshalAs(UnmanagedType.I1)] bool enabled,
                                                          [MarshalAs(UnmanagedType.I1)] out bool previous);

        // ------------------------------------------------------------ residency manager
        // Wrapped by ResidencyManager and Tensor.PinResident/IsResident (Residency.cs). The structs
        // below mirror the header's; tests/HeaderLayoutTests.cs checks their fields and offsets.

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_config_default(out NativeResidencyConfig result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_configure(ref NativeResidencyConfig config);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_disable();

        /// <summary>Never fails and leaves tr_last_error alone.</summary>
        [DllImport(Lib, ExactSpelling = true)]
        [return: MarshalAs(UnmanagedType.I1)]
        internal static extern bool tr_residency_enabled();

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_stats_get(out NativeResidencyStats result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_mark_iteration();

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_pin_resident(TensorHandle t, [MarshalAs(UnmanagedType.I1)] bool pinned);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_tensor_is_resident(TensorHandle t, [MarshalAs(UnmanagedType.I1)] out bool result);

        /// <summary>`callback` null removes the callback. The caller keeps the delegate reachable while registered.</summary>
        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_set_callback(NativeEventFn callback, IntPtr user);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_timeline_start();

        /// <summary>`path`: NUL-terminated UTF-8 (see Utf8Z).</summary>
        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_residency_timeline_write(byte[] path);

        // ------------------------------------------------------------ weights and models
        // Wrapped by Weights (Weights.cs) and MiniLM (MiniLM.cs).

        /// <summary>`path`: NUL-terminated UTF-8. `tensors`/`names` null with lengths 0 sizes the buffers.</summary>
        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_weights_load(byte[] path, ulong[] tensors, UIntPtr tensors_len,
                                                      byte[] names, UIntPtr names_len,
                                                      out UIntPtr out_count, out UIntPtr out_names_len);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_options_default(out NativeMiniLMOptions result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_load(byte[] model_dir, ref NativeMiniLMOptions options, out ulong result);

        /// <summary>The raw form on the bare id, for MiniLMHandle.ReleaseHandle.</summary>
        [DllImport(Lib, EntryPoint = "tr_minilm_release", ExactSpelling = true)]
        internal static extern Status tr_minilm_release_raw(ulong m);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_set_weight_mode(MiniLMHandle m, int weight_mode, ulong chunk_capacity);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_dim(MiniLMHandle m, out UIntPtr result);

        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_weight_bytes(MiniLMHandle m, out ulong result);

        /// <summary>`sentences`: pointers to NUL-terminated UTF-8, pinned by the caller for the call.</summary>
        [DllImport(Lib, ExactSpelling = true)]
        internal static extern Status tr_minilm_embed(MiniLMHandle m, IntPtr[] sentences, UIntPtr count,
                                                      float[] output, UIntPtr out_len, out UIntPtr out_written);

        /// <summary>
        /// `s` as NUL-terminated UTF-8, for a `const char *` parameter (a path, a sentence). A NUL
        /// inside `s` would end the C string there ("a\0b" would open "a"): ArgumentException.
        /// </summary>
        internal static byte[] Utf8Z(string s)
        {
            if (s.IndexOf('\0') >= 0)
                throw new ArgumentException("the text contains a NUL character, which a C string cannot carry: \"" +
                                            s.Replace("\0", "\\0") + "\"");
            var bytes = new byte[Encoding.UTF8.GetByteCount(s) + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, bytes, 0);
            return bytes;
        }
    }

    /// <summary>The C struct tr_residency_config.</summary>
    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeResidencyConfig
    {
        public int Device;
        public int DeviceIndex;
        public int Policy;
        public ulong BudgetBytes;
        [MarshalAs(UnmanagedType.I1)] public bool PinHostMemory;
        public uint PrefetchDepth;
        public ulong SimulatedCapacity;
    }

    /// <summary>The C struct tr_minilm_options.</summary>
    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeMiniLMOptions
    {
        public int WeightMode;
        public ulong ChunkCapacity;
        public uint BatchSize;
        public uint MaxSeqLength;
        public ulong EmbeddingBlockBytes;
        [MarshalAs(UnmanagedType.I1)] public bool Progress;
    }

    /// <summary>The C struct tr_residency_stats.</summary>
    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeResidencyStats
    {
        public ulong Budget;
        public ulong DeviceBytes;
        public ulong PeakDeviceBytes;
        public ulong PinnedBytes;
        public ulong Ops;
        public ulong Loads;
        public ulong LoadBytes;
        public ulong Evictions;
        public ulong EvictedBytes;
        public ulong WriteBacks;
        public ulong WriteBackBytes;
        public ulong Prefetches;
        public ulong PrefetchBytes;
        public ulong PrefetchHits;
        public ulong PrefetchMisses;
        public ulong TransferWaitNs;
        public ulong OomRetries;
        public ulong PageLockedAllocs;
        public ulong PageLockedBytes;
        public ulong PageableCopies;
        public ulong PageableCopyBytes;
        public ulong OpWaits;
        public ulong ReadWaits;
        public ulong NeedlessWriteBacks;
    }

    /// <summary>The C struct tr_event (blittable: passed to the callback by pointer, not copied).</summary>
    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeEvent
    {
        public int Kind;
        public ulong Entry;
        public ulong Bytes;
        public ulong DeviceBytes;
        public IntPtr Op;
        public double TimeUs;
        public double DurationUs;
    }

    /// <summary>tr_event_fn: `void (*)(const struct tr_event *event, void *user)`.</summary>
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void NativeEventFn(ref NativeEvent e, IntPtr user);
}
