// Ops generated from libtorch's schema, through the C# wrappers, written as a user writes them:
// optional arguments as null or a value, strings, dtypes, a tuple and a list of results (one
// longer than the wrapper's first buffer), an in-place op, an error, and nothing left behind.
// Values are chosen so that float32 results are exact.
using System;
using TensorRef;

namespace TensorRef.Tests
{
    static class SchemaOpsTests
    {
        [Test]
        static void OptionalArguments_Strings_Dtypes()
        {
            using (torch.NewDisposeScope())
            {
                var x = torch.Tensor(new float[] { 1, -2, 3, -4, 5, -6 }, 2, 3);
                Check.Values(new float[] { 1, 0, 3, 0, 5, 0 }, x.ClampMin(0), "clamp_min");
                Check.Equal("1,-1,2,-4,1,-5", string.Join(",", x.Cumsum(1, DType.F64).ToArray<double>()), "cumsum to f64");
                Check.Values(new float[] { 1, -1, 2, -4, 1, -5 }, x.Cumsum(1, null), "cumsum, dtype left out");
                var y = torch.Tensor(new float[] { 7, -7, 5, 6, 1, 2 }, 2, 3);
                var two = torch.Full(new long[] { 2, 3 }, 2.0);
                Check.Values(new float[] { 3, -4, 2, 3, 0, 1 }, y.DivTensorMode(two, "floor"), "floor division");
                Check.Values(new float[] { 3.5f, -3.5f, 2.5f, 3, 0.5f, 1 }, y.DivTensorMode(two, null), "true division");
                Check.Equal("3,2", string.Join(",", torch.Einsum("ij->ji", new[] { x }, null).Shape), "einsum");
                Check.Equal(3L, x.SizeInt(1), "size.int");
                Check.True(x.IsFloatingPoint(), "is_floating_point");
                Check.Equal(DType.F32, x.ResultTypeScalar(2), "result_type.Scalar");
                Check.Equal(DType.F16, torch.PromoteTypes(DType.I64, DType.F16), "promote_types");
            }
        }

        [Test]
        static void TuplesAndLists_ComeWhole()
        {
            using (torch.NewDisposeScope())
            {
                var x = torch.Tensor(new float[] { 3, 1, 2, 9, 7, 8 }, 2, 3);
                var top = x.Topk(2, 1, true, true);
                Check.Equal(2, top.Length, "topk gives values and indices");
                Check.Values(new float[] { 3, 2, 9, 8 }, top[0], "values");
                Check.Equal("0,2,0,2", string.Join(",", top[1].ToArray<long>()), "indices");
                var rows = torch.Arange(0, 200, 1).Reshape(new long[] { 100, 2 }).UnbindInt(0);
                Check.Equal(100, rows.Length, "more than the first buffer of 64: made again with room");
                Check.Values(new float[] { 198, 199 }, rows[99], "the last row");
            }
        }

        [Test]
        static void InPlace_Errors_NoLeftovers()
        {
            long live = torch.LiveHandles;
            using (var x = torch.Tensor(new float[] { 1, -2, 3, -4 }))
            {
                Check.True(ReferenceEquals(x.ClampMin_(0), x), "an in-place op returns its receiver");
                Check.Values(new float[] { 1, 0, 3, 0 }, x, "clamped in place");
                var e = Check.Throws(Status.Torch, () => x.DivTensorMode(x, "sideways"), "an unknown rounding mode");
                Check.True(e.LibraryMessage.Contains("rounding_mode"), "the message names the argument: " + e.LibraryMessage);
                for (int i = 0; i < 3; i++)
                    foreach (var t in x.Topk(1, 0, true, true)) t.Dispose();
            }
            Check.Equal(live, torch.LiveHandles, "live handles");
        }
    }
}
