// Weights: every tensor of a safetensors file as a named Tensor (tr_weights_load), in file order,
// disposed together; and Tensor.DisposeAll, which releases many tensors in one library call
// (tr_tensor_release_many: one lock for the whole batch).
//
// The tensors are ordinary Tensors: created while a dispose scope is open, they belong to it (as
// any op's result does). Disposing the Weights releases every tensor it still holds; a tensor taken
// out with Take is the caller's to dispose.
using System;
using System.Collections;
using System.Collections.Generic;
using System.Linq;
using System.Text;

namespace TensorRef
{
    /// <summary>The named tensors of one safetensors file, in file order.</summary>
    public sealed class Weights : IReadOnlyDictionary<string, Tensor>, IDisposable
    {
        readonly string[] _names;
        readonly Tensor[] _tensors;
        readonly Dictionary<string, int> _index;

        Weights(string[] names, Tensor[] tensors)
        {
            _names = names;
            _tensors = tensors;
            _index = new Dictionary<string, int>(names.Length, StringComparer.Ordinal);
            for (int i = 0; i < names.Length; i++) _index[names[i]] = i;
        }

        /// <summary>
        /// Loads every tensor of the safetensors file at `path` into host memory (the file is
        /// memory-mapped and each tensor copied once). Throws TensorRefException with the
        /// library's status and message: Io (missing or unreadable file), Format (truncated or
        /// corrupt file), Dtype (a dtype libtensorref has no type for).
        /// </summary>
        public static Weights Load(string path)
        {
            if (path == null) throw new ArgumentNullException("path");
            var p = Native.Utf8Z(path);
            // The sizing call reads the header only and answers BufferTooSmall with the sizes (Ok for
            // a file without tensors); the load fills buffers of exactly that size. Should the file
            // change in between, the load answers BufferTooSmall with the new sizes: try again.
            UIntPtr count, namesLen;
            var sizing = Native.tr_weights_load(p, null, UIntPtr.Zero, null, UIntPtr.Zero, out count, out namesLen);
            if (sizing != Status.BufferTooSmall) Native.Check(sizing, "tr_weights_load");
            for (int attempt = 0; ; attempt++)
            {
                var ids = new ulong[(int)count];
                var names = new byte[(int)namesLen];
                var status = Native.tr_weights_load(p, ids, count, names, namesLen, out count, out namesLen);
                if (status == Status.BufferTooSmall && attempt < 3) continue;
                Native.Check(status, "tr_weights_load");
                var tensors = new Tensor[ids.Length];
                for (int i = 0; i < ids.Length; i++) tensors[i] = new Tensor(ids[i]);
                return new Weights(SplitNames(names, ids.Length), tensors);
            }
        }

        /// <summary>`count` NUL-terminated UTF-8 names, back to back.</summary>
        static string[] SplitNames(byte[] buf, int count)
        {
            var names = new string[count];
            int start = 0;
            for (int i = 0; i < count; i++)
            {
                int end = Array.IndexOf(buf, (byte)0, start);
                if (end < 0) throw new InvalidOperationException("tr_weights_load returned fewer names than tensors");
                names[i] = Encoding.UTF8.GetString(buf, start, end - start);
                start = end + 1;
            }
            if (start != buf.Length)  // the library refuses names with a NUL; a split one would shift every later name
                throw new InvalidOperationException("tr_weights_load returned more names than tensors");
            return names;
        }

        /// <summary>The tensor names in file order.</summary>
        public IReadOnlyList<string> Names => _names;

        public int Count => _names.Length;

        /// <summary>The tensor called `name`; KeyNotFoundException if the file has none.</summary>
        public Tensor this[string name]
        {
            get
            {
                Tensor t;
                if (!TryGetValue(name, out t)) throw new KeyNotFoundException("no tensor named '" + name + "' in these weights");
                return t;
            }
        }

        public bool ContainsKey(string name) => name != null && _index.ContainsKey(name);

        public bool TryGetValue(string name, out Tensor value)
        {
            int i;
            value = name != null && _index.TryGetValue(name, out i) ? _tensors[i] : null;
            return value != null;
        }

        public IEnumerable<string> Keys => _names;

        public IEnumerable<Tensor> Values => _tensors;

        public IEnumerator<KeyValuePair<string, Tensor>> GetEnumerator()
        {
            for (int i = 0; i < _names.Length; i++)
                yield return new KeyValuePair<string, Tensor>(_names[i], _tensors[i]);
        }

        IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

        /// <summary>Total bytes of the tensors (element count times element size).</summary>
        public long Bytes => _tensors.Sum(t => t.Numel * ElementSize(t.Dtype));

        static long ElementSize(DType d)
        {
            switch (d)
            {
                case DType.U8: case DType.I8: case DType.Bool: return 1;
                case DType.I16: case DType.F16: case DType.Bf16: return 2;
                case DType.I32: case DType.F32: return 4;
                default: return 8;
            }
        }

        /// <summary>Whether Dispose ran.</summary>
        public bool IsDisposed { get; private set; }

        /// <summary>Releases every tensor these weights hold, in one library call.</summary>
        public void Dispose()
        {
            if (IsDisposed) return;
            IsDisposed = true;
            Tensor.DisposeAll(_tensors);
        }
    }

    public sealed partial class Tensor
    {
        /// <summary>
        /// Disposes every tensor of `tensors` (nulls and disposed ones are skipped) with one
        /// library call, tr_tensor_release_many, which takes the library's lock once for the batch.
        /// Each tensor ends as after its own Dispose. A handle a scope already released is skipped
        /// quietly, as Dispose does.
        /// </summary>
        public static void DisposeAll(IEnumerable<Tensor> tensors)
        {
            if (tensors == null) throw new ArgumentNullException("tensors");
            var ids = new List<ulong>();
            foreach (var t in tensors)
            {
                var h = t == null ? null : System.Threading.Interlocked.Exchange(ref t._handle, null);
                if (h == null) continue;
                ids.Add(h.Id);
                // The SafeHandle gives up its reference without releasing it; the batch does.
                h.SetHandleAsInvalid();
            }
            if (ids.Count == 0) return;
            var status = Native.tr_tensor_release_many(ids.ToArray(), (UIntPtr)ids.Count);
            if (status != Status.Ok && status != Status.StaleHandle)
                throw Native.Error(status, "tr_tensor_release_many");
        }
    }
}
