// Tensor data and ops through the binding: values in and out, shape/dtype/item, the generated
// op methods and torch functions (optional and list arguments, in-place ops, autograd) and the
// C# operators, each checked against values computed by hand.
using System;
using TensorRef;

namespace TensorRef.Tests
{
    static class TensorTests
    {
        [Test]
        static void DataRoundTrip_ShapeDtypeNumel()
        {
            using (torch.NewDisposeScope())
            {
                var t = torch.Tensor(new float[] { 1, 2, 3, 4, 5, 6 }, 2, 3);
                Check.Equal("2,3", string.Join(",", t.Shape), "shape");
                Check.Equal(DType.F32, t.Dtype, "dtype");
                Check.Equal(6L, t.Numel, "numel");
                Check.Values(new float[] { 1, 2, 3, 4, 5, 6 }, t, "values");
                var d = torch.Tensor(new double[] { 0.5, -1.5 });
                Check.Equal(DType.F64, d.Dtype, "double[] gives F64");
                Check.Equal("-1.5", d.ToArray<double>()[1].ToString(System.Globalization.CultureInfo.InvariantCulture), "F64 value");
                var l = torch.Tensor(new long[] { 7, 8, 9 });
                Check.Equal(8L, l.ToArray<long>()[1], "I64 value");
                Check.Equal(0, torch.Scalar(3).Shape.Length, "a scalar has no dimensions");
                Check.Near(3, torch.Scalar(3).Item(), 0, "scalar item");
                Check.Equal("Tensor([2, 3], F32)", t.ToString(), "ToString");
                var big = torch.Zeros(new long[] { 1, 1, 1, 1, 1, 1, 1, 1, 1, 2 });
                Check.Equal(10, big.Shape.Length, "more dimensions than the first shape buffer");
            }
        }

        [Test]
        static void Device_AndLiveBytes_NameDevicesAsTheConfigDoes()
        {
            ulong before = torch.LiveBytes();
            using (torch.NewDisposeScope())
            {
                var t = torch.Zeros(new long[] { 4, 8 }, DType.F64);
                Check.Equal(Device.Cpu, t.DeviceType, "device type");
                Check.Equal(0, t.DeviceIndex, "device index of host memory");
                Check.Equal("cpu", t.Device, "device name");
                Check.Equal(before + 4 * 8 * 8, torch.LiveBytes(Device.Cpu), "host bytes held");
                Check.Equal(0UL, torch.LiveBytes(Device.Cuda, 0), "no CUDA handle");
                Check.Throws(Status.InvalidArg, () => torch.LiveBytes(Device.Simulated), "host memory");
            }
            Check.Equal(before, torch.LiveBytes(), "bytes given back with the scope");
        }

        [Test]
        static void Operators_MatchHandComputedValues()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Tensor(new float[] { 1, 2, 3, 4 });
                var b = torch.Tensor(new float[] { 4, 3, 2, 1 });
                Check.Values(new float[] { 5, 5, 5, 5 }, a + b, "a + b");
                Check.Values(new float[] { -3, -1, 1, 3 }, a - b, "a - b");
                Check.Values(new float[] { 4, 6, 6, 4 }, a * b, "a * b");
                Check.Values(new float[] { 0.25f, 2f / 3, 1.5f, 4 }, a / b, "a / b");
                Check.Values(new float[] { -1, -2, -3, -4 }, -a, "-a");
                Check.Values(new float[] { 3, 4, 5, 6 }, a + 2, "a + 2");
                Check.Values(new float[] { 3, 4, 5, 6 }, 2 + a, "2 + a");
                Check.Values(new float[] { 9, 8, 7, 6 }, 10 - a, "10 - a");
                Check.Values(new float[] { 12, 6, 4, 3 }, 12 / a, "12 / a");
                Check.Values(new float[] { 0.5f, 1, 1.5f, 2 }, a / 2, "a / 2");
                Check.Values(new float[] { 2, 4, 6, 8 }, 2 * a, "2 * a");
            }
        }

        [Test]
        static void Remainder_TakesTheDivisorsSign_OnEitherSide()
        {
            using (torch.NewDisposeScope())
            {
                var a = torch.Tensor(new float[] { 7, -7, 5.5f, 2 });
                var b = torch.Tensor(new float[] { 2, 2, -2, 4 });
                Check.Values(new float[] { 1, 1, -0.5f, 2 }, a % b, "a % b");
                Check.Values(new float[] { 1, 1, 1.5f, 0 }, a % 2.0, "a % 2.0");
                Check.Values(new float[] { 1, 2, -3 }, 5.0 % torch.Tensor(new float[] { 2, 3, -4 }), "5.0 % t");
                var ints = torch.Tensor(new long[] { 7, -7, 9 });
                Check.Equal(DType.I64, (ints % 4).Dtype, "an integer scalar keeps the dtype");
                Check.Equal("3,1,1", string.Join(",", (ints % 4).ToArray<long>()), "ints % 4");
            }
        }

        [Test]
        static void CompoundAssignment_IsANewTensor_TheMethodIsInPlace()
        {
            using (torch.NewDisposeScope())
            {
                var w = torch.Tensor(new float[] { 1, 2, 3 });
                var kept = w;  // another reference to the same Tensor, as a parameter list holds
                var g = torch.Tensor(new float[] { 1, 1, 1 });
                w += g;  // C#: w = w + g, a new tensor
                Check.True(!ReferenceEquals(w, kept), "+= assigned a new Tensor");
                Check.Values(new float[] { 2, 3, 4 }, w, "w after +=");
                Check.Values(new float[] { 1, 2, 3 }, kept, "the old tensor is unchanged");
                w %= 3.0;
                Check.Values(new float[] { 2, 0, 1 }, w, "w after %=");

                var same = kept.Add_(g);  // PyTorch's in-place +=
                Check.True(ReferenceEquals(same, kept), "Add_ returns its receiver");
                Check.Values(new float[] { 2, 3, 4 }, kept, "kept after Add_");
                var alias = kept.Alias();
                kept.RemainderScalar_(3);
                Check.Values(new float[] { 2, 0, 1 }, alias, "an in-place method writes the shared storage");
            }
        }

        [Test]
        static void GeneratedOps_ReductionsShapesLists()
        {
            using (torch.NewDisposeScope())
            {
                var m = torch.Tensor(new float[] { 1, 2, 3, 4, 5, 6 }, 2, 3);
                Check.Near(21, m.Sum().Item(), 1e-6, "Sum");
                Check.Values(new float[] { 6, 15 }, m.SumDim(new long[] { 1 }, false), "SumDim");
                Check.Values(new float[] { 3, 6 }, m.MaxDim(1, false), "MaxDim");
                Check.Equal("3,2", string.Join(",", m.Transpose(0, 1).Shape), "Transpose");
                Check.Equal("6", string.Join(",", m.Reshape(new long[] { -1 }).Shape), "Reshape with -1");
                var c = torch.Cat(new[] { m, m }, 0);
                Check.Equal("4,3", string.Join(",", c.Shape), "Cat of a list");
                var eye = torch.Eye(3);
                Check.Values(new float[] { 1, 2, 3, 4, 5, 6 }, m.Matmul(eye), "Matmul by the identity");
                var w = torch.Tensor(new float[] { 1, 0, 0, 0, 1, 0 }, 2, 3);
                Check.Values(new float[] { 1, 2, 4, 5 }, m.Linear(w, null), "Linear with no bias (null optional)");
                var bias = torch.Tensor(new float[] { 10, 20 });
                Check.Values(new float[] { 11, 22, 14, 25 }, m.Linear(w, bias), "Linear with a bias");
                Check.Equal(DType.I64, m.Argmax(1, false).Dtype, "Argmax gives I64");
                Check.Equal("2,2", string.Join(",", m.Argmax(1, false).ToArray<long>()), "Argmax");
            }
        }

        [Test]
        static void InPlaceOps_ReturnTheSameObject_RegisterNothing()
        {
            using (var d = torch.NewDisposeScope())
            {
                var a = torch.Tensor(new float[] { 1, 2 });
                var b = torch.Tensor(new float[] { 10, 20 });
                long owned = d.DisposablesCount;
                long live = torch.LiveHandles;
                var r = a.Add_(b).MulScalar_(2);
                Check.True(ReferenceEquals(a, r), "the in-place op returns its receiver");
                Check.Values(new float[] { 22, 44 }, a, "modified in place");
                Check.Equal(owned, d.DisposablesCount, "nothing new in the scope");
                Check.Equal(live, torch.LiveHandles, "no new handle");
            }
        }

        [Test]
        static void Autograd_GradIsNullBeforeBackward_ThenANewHandle()
        {
            using (var d = torch.NewDisposeScope())
            {
                var x = torch.Tensor(new float[] { 1, 2, 3 }).RequiresGrad_(true);
                Check.True(x.RequiresGrad(), "RequiresGrad");
                Check.True(x.Grad() == null, "no gradient before backward");
                var sq = x * x;
                sq.Sum().Backward();
                long owned = d.DisposablesCount;
                var g = x.Grad();
                Check.Values(new float[] { 2, 4, 6 }, g, "d(sum x^2)/dx = 2x");
                Check.Equal(owned + 1, d.DisposablesCount, "the gradient is a new handle, owned by the scope");
                using (torch.NoGrad())
                    Check.True(!(x * 2).RequiresGrad(), "no graph under NoGrad");
                Check.True((x * 2).RequiresGrad(), "grad mode restored after NoGrad");
            }
        }

        [Test]
        static void Alias_HasItsOwnLife_SharesStorage()
        {
            var a = torch.Tensor(new float[] { 1, 2 });
            var b = a.Alias();
            Check.True(a.Id != b.Id, "a new handle");
            a.Dispose();
            Check.True(b.IsValid, "disposing one alias leaves the other valid");
            var c = b.Alias();
            c.MulScalar_(3);
            Check.Values(new float[] { 3, 6 }, b, "same storage");
            b.Dispose();
            c.Dispose();
        }

        [Test]
        static void ManualSeed_Reproduces()
        {
            using (torch.NewDisposeScope())
            {
                torch.ManualSeed(42);
                var a = torch.Randn(new long[] { 5 }).ToArray<float>();
                torch.ManualSeed(42);
                var b = torch.Randn(new long[] { 5 }).ToArray<float>();
                Check.Equal(string.Join(",", a), string.Join(",", b), "same seed, same values");
            }
        }
    }
}
