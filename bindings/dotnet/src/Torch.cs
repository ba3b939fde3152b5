// The static entry points users start from, with TorchSharp's names where TorchSharp has them:
// torch.NewDisposeScope(), tensors from C# arrays, no-grad regions, seeding, versions and the
// process-wide live-handle count. The generated half (Ops.g.cs) adds one function per op whose
// first parameter is not a tensor (torch.Zeros, torch.Cat, torch.OptimSgdStep...).
using System;
using System.Runtime.InteropServices;

namespace TensorRef
{
    public static partial class torch
    {
        /// <summary>Opens a dispose scope on this thread; use it in a `using` block.</summary>
        public static DisposeScope NewDisposeScope() => DisposeScope.New();

        /// <summary>This thread's innermost open scope, or null.</summary>
        public static DisposeScope CurrentDisposeScope => DisposeScopeManager.CurrentDisposeScope;

        /// <summary>A tensor holding a copy of `data`; `shape` defaults to [data.Length].</summary>
        public static Tensor Tensor(float[] data, params long[] shape) => TensorRef.Tensor.FromData(data, Shape(shape));
        public static Tensor Tensor(double[] data, params long[] shape) => TensorRef.Tensor.FromData(data, Shape(shape));
        public static Tensor Tensor(long[] data, params long[] shape) => TensorRef.Tensor.FromData(data, Shape(shape));
        public static Tensor Tensor(int[] data, params long[] shape) => TensorRef.Tensor.FromData(data, Shape(shape));
        public static Tensor Tensor(byte[] data, params long[] shape) => TensorRef.Tensor.FromData(data, Shape(shape));

        static long[] Shape(long[] shape) => shape == null || shape.Length == 0 ? null : shape;

        /// <summary>A scalar (0-dimensional) tensor.</summary>
        public static Tensor Scalar(double value, DType dtype = DType.F32) => Full(new long[0], value, dtype);

        /// <summary>Turns gradient tracking off on this thread until the result is disposed.</summary>
        public static IDisposable NoGrad() => new GradMode(false);

        /// <summary>Turns gradient tracking on or off on this thread until the result is disposed.</summary>
        public static IDisposable SetGradEnabled(bool enabled) => new GradMode(enabled);

        /// <summary>Seeds libtorch's default generator (Rand, Randn, Dropout).</summary>
        public static void ManualSeed(ulong seed) => Native.Check(Native.tr_manual_seed(seed), "tr_manual_seed");

        /// <summary>Live tensor handles in the whole process, all threads (tr_live_handles).</summary>
        public static long LiveHandles => (long)(ulong)Native.tr_live_handles();

        /// <summary>Bytes held by live handles on a device: Device.Cpu (host memory), or Device.Cuda with its number.</summary>
        public static ulong LiveBytes(Device device = Device.Cpu, int index = 0)
        {
            ulong n;
            Native.Check(Native.tr_live_bytes(device, index, out n), "tr_live_bytes");
            return n;
        }

        /// <summary>The library's version text (tr_version).</summary>
        public static string Version => Marshal.PtrToStringAnsi(Native.tr_version());

        /// <summary>The library's ABI version (tr_abi_version); the binding refuses to load any other.</summary>
        public static uint AbiVersion => Native.tr_abi_version();

        /// <summary>The ABI version this binding was generated for (TR_ABI_VERSION of its header).</summary>
        public static uint BindingAbiVersion => Native.AbiVersion;

        sealed class GradMode : IDisposable
        {
            readonly bool _previous;
            bool _done;

            public GradMode(bool enabled)
            {
                Native.Check(Native.tr_grad_set_enabled(enabled, out _previous), "tr_grad_set_enabled");
            }

            public void Dispose()
            {
                if (_done) return;
                _done = true;
                bool ignored;
                Native.Check(Native.tr_grad_set_enabled(_previous, out ignored), "tr_grad_set_enabled");
            }
        }
    }
}
