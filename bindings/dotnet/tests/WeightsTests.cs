// Weights.Load against the model's own safetensors file, read independently here (8-byte header
// length, JSON header, data section): the names, dtypes and shapes are the file's, the bytes are
// the file's, and the sizes add up to the data section. Missing, truncated and corrupt files throw
// TensorRefException with Io / Format and the library's message; disposing the Weights (one
// tr_tensor_release_many) or their scope releases every tensor. Tensor.DisposeAll on its own.
// The runner checks after each test that no handle leaked.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text;
using TensorRef;

namespace TensorRef.Tests
{
    static class WeightsTests
    {
        /// <summary>The file's header: name -> (dtype, shape, [begin, end) in the data section), and where data starts.</summary>
        internal static Dictionary<string, Tuple<string, long[], long, long>> ReadHeader(string path, out long dataStart)
        {
            using (var f = File.OpenRead(path))
            using (var r = new BinaryReader(f))
            {
                long n = r.ReadInt64();
                var json = (Dictionary<string, object>)MiniJson.Parse(Encoding.UTF8.GetString(r.ReadBytes((int)n)));
                dataStart = 8 + n;
                var result = new Dictionary<string, Tuple<string, long[], long, long>>();
                foreach (var kv in json)
                {
                    if (kv.Key == "__metadata__") continue;
                    var info = (Dictionary<string, object>)kv.Value;
                    var offsets = (List<object>)info["data_offsets"];
                    result[kv.Key] = Tuple.Create((string)info["dtype"],
                                                  ((List<object>)info["shape"]).Select(d => (long)(double)d).ToArray(),
                                                  (long)(double)offsets[0], (long)(double)offsets[1]);
                }
                return result;
            }
        }

        static float[] ReadFloats(string path, long at, long count)
        {
            using (var f = File.OpenRead(path))
            {
                f.Seek(at, SeekOrigin.Begin);
                var bytes = new byte[count * 4];
                Check.Equal(bytes.Length, f.Read(bytes, 0, bytes.Length), "bytes read from the file");
                var values = new float[count];
                Buffer.BlockCopy(bytes, 0, values, 0, bytes.Length);
                return values;
            }
        }

        [Test]
        static void Load_GivesEveryTensorOfTheFileByName()
        {
            string path = ModelFiles.Safetensors;
            long dataStart;
            var header = ReadHeader(path, out dataStart);
            long live = torch.LiveHandles;
            using (var w = Weights.Load(path))
            {
                Check.Equal(header.Count, w.Count, "tensor count");
                Check.Equal(live + header.Count, torch.LiveHandles, "one live handle per tensor");
                Check.True(w.Names.OrderBy(n => n, StringComparer.Ordinal).SequenceEqual(header.Keys.OrderBy(n => n, StringComparer.Ordinal)),
                           "the names are the file's");
                Check.True(w.Keys.SequenceEqual(w.Names) && w.Select(kv => kv.Key).SequenceEqual(w.Names),
                           "Keys and enumeration follow Names' order");
                Check.Equal("30522,384", string.Join(",", w["embeddings.word_embeddings.weight"].Shape), "word embeddings' shape");
                Check.Equal("512,384", string.Join(",", w["embeddings.position_embeddings.weight"].Shape), "position embeddings' shape");
                Check.Equal("1536,384", string.Join(",", w["encoder.layer.5.intermediate.dense.weight"].Shape), "layer 5's FFN weight");
                foreach (var kv in w)
                {
                    var want = header[kv.Key];
                    Check.Equal(string.Join(",", want.Item2), string.Join(",", kv.Value.Shape), kv.Key + "'s shape");
                    Check.Equal(want.Item1 == "F32" ? DType.F32 : DType.I64, kv.Value.Dtype, kv.Key + "'s dtype (" + want.Item1 + ")");
                }
                // The data section holds exactly the tensors' bytes.
                Check.Equal(new FileInfo(path).Length - dataStart, w.Bytes, "the tensors' bytes equal the data section");
                // Bytes equal to the file's, for a small tensor and for the last rows of the largest one.
                var ln = header["embeddings.LayerNorm.weight"];
                Check.True(ReadFloats(path, dataStart + ln.Item3, 384).SequenceEqual(w["embeddings.LayerNorm.weight"].ToArray<float>()),
                           "embeddings.LayerNorm.weight holds the file's floats");
                var we = header["embeddings.word_embeddings.weight"];
                var table = w["embeddings.word_embeddings.weight"].ToArray<float>();
                long tail = 3 * 384;
                Check.True(ReadFloats(path, dataStart + we.Item4 - tail * 4, tail).SequenceEqual(table.Skip(table.Length - (int)tail)),
                           "the word embeddings' last rows hold the file's floats");
                Check.True(w.ContainsKey("pooler.dense.weight") || !header.ContainsKey("pooler.dense.weight"), "ContainsKey");
                Check.True(!w.ContainsKey("no.such.tensor"), "ContainsKey of an absent name");
                Tensor none;
                Check.True(!w.TryGetValue("no.such.tensor", out none) && none == null, "TryGetValue of an absent name");
                Check.Throws<KeyNotFoundException>(() => { var _ = w["no.such.tensor"]; }, "indexing an absent name");
            }
            Check.Equal(live, torch.LiveHandles, "Dispose released every tensor");
        }

        [Test]
        static void Dispose_ReleasesAllTensorsOnce()
        {
            var w = Weights.Load(ModelFiles.Safetensors);
            var t = w["embeddings.LayerNorm.bias"];
            w.Dispose();
            Check.True(w.IsDisposed && t.IsDisposed, "the Weights and their tensors are disposed");
            Check.Throws(Status.StaleHandle, () => t.Numel.ToString(), "using a tensor of disposed weights");
            w.Dispose(); // a second Dispose does nothing
        }

        [Test]
        static void ScopeOwnsWeightsLoadedInside()
        {
            Weights w;
            Tensor kept;
            long live = torch.LiveHandles;
            using (var scope = torch.NewDisposeScope())
            {
                w = Weights.Load(ModelFiles.Safetensors);
                Check.Equal(w.Count, (int)scope.DisposablesCount, "the open scope owns every loaded tensor");
                kept = w["embeddings.LayerNorm.weight"].MoveToOuterDisposeScope();
            }
            Check.Equal(live + 1, torch.LiveHandles, "the scope released all but the tensor moved out");
            Check.Equal(384L, kept.Numel, "the tensor moved out is alive");
            w.Dispose(); // the scope's releases first: each is skipped quietly, the kept one released
            Check.Equal(live, torch.LiveHandles, "Weights.Dispose released the tensor moved out of the scope");
        }

        static void WithFile(byte[] contents, Action<string> test)
        {
            string path = ModelFiles.TempFile(".safetensors");
            File.WriteAllBytes(path, contents);
            try { test(path); }
            finally { File.Delete(path); }
        }

        static byte[] Prefix(string path, int n)
        {
            var bytes = new byte[n];
            using (var f = File.OpenRead(path)) Check.Equal(n, f.Read(bytes, 0, n), "prefix read");
            return bytes;
        }

        [Test]
        static void MissingFile_IsIo()
        {
            string path = ModelFiles.TempFile(".safetensors");
            var e = Check.Throws(Status.Io, () => Weights.Load(path), "a missing file");
            Check.Equal("tr_weights_load", e.Function, "the failing function");
            Check.True(e.LibraryMessage.Contains(Path.GetFileName(path)), "the message names the file: " + e.LibraryMessage);
            Check.Throws<ArgumentNullException>(() => Weights.Load(null), "a null path");
        }

        [Test]
        static void TruncatedOrCorruptFile_IsFormat()
        {
            long dataStart;
            ReadHeader(ModelFiles.Safetensors, out dataStart);
            // Cut inside the JSON header, then inside the data section (the header promises more).
            WithFile(Prefix(ModelFiles.Safetensors, 1000), p =>
                Check.Throws(Status.Format, () => Weights.Load(p), "a file cut inside its header"));
            WithFile(Prefix(ModelFiles.Safetensors, (int)dataStart + 4096), p =>
                Check.Throws(Status.Format, () => Weights.Load(p), "a file cut inside its data"));
            WithFile(Encoding.ASCII.GetBytes("this is not a safetensors file at all"), p =>
                Check.Throws(Status.Format, () => Weights.Load(p), "a file that is not safetensors"));
            WithFile(new byte[0], p => Check.Throws(Status.Format, () => Weights.Load(p), "an empty file"));
        }

        /// <summary>A safetensors file of one F32 [1] tensor per name.</summary>
        static byte[] Named(params string[] names)
        {
            var json = "{" + string.Join(",", names.Select((n, i) =>
                "\"" + n.Replace("\0", "\\u0000") + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" + 4 * i + "," + (4 * i + 4) + "]}")) + "}";
            var header = Encoding.UTF8.GetBytes(json);
            return BitConverter.GetBytes((long)header.Length).Concat(header).Concat(new byte[4 * names.Length]).ToArray();
        }

        // Names travel NUL-separated through the C ABI: {"a\0b", "c"} loaded as {"a", "b"}, every
        // later tensor under the wrong name. The library refuses such a file; a path with a NUL
        // would have opened "a".
        [Test]
        static void NulInANameOrThePath_IsRefused()
        {
            WithFile(Named("a", "c"), p =>
            {
                using (var w = Weights.Load(p)) Check.Equal("a,c", string.Join(",", w.Names), "plain names");
                Check.Throws<ArgumentException>(() => Weights.Load(p + "\0b"), "a path with a NUL");
            });
            WithFile(Named("a\0b", "c"), p =>
            {
                var e = Check.Throws(Status.Format, () => Weights.Load(p), "a name with a NUL");
                Check.True(e.LibraryMessage.Contains("NUL"), "the message says why: " + e.LibraryMessage);
            });
            Check.Throws(Status.Io, () => Weights.Load(Path.GetTempPath()), "a directory");
        }

        [Test]
        static void DisposeAll_ReleasesInOneCall()
        {
            long live = torch.LiveHandles;
            var a = Helpers.Small();
            var b = Helpers.Small();
            var c = Helpers.Small();
            c.Dispose();
            Check.Equal(live + 2, torch.LiveHandles, "two live tensors");
            Tensor.DisposeAll(new[] { a, null, b, c, a });
            Check.Equal(live, torch.LiveHandles, "both released; null, disposed and repeated entries skipped");
            Check.True(a.IsDisposed && b.IsDisposed, "each tensor reads as disposed");
            Check.Throws(Status.StaleHandle, () => b.Numel.ToString(), "a tensor released by DisposeAll");
            b.Dispose(); // nothing left to do
            Tensor.DisposeAll(new Tensor[0]);
            Check.Throws<ArgumentNullException>(() => Tensor.DisposeAll(null), "null list");
        }
    }
}
