// The C# operators of Tensor: + - * / % between tensors and with scalars (either side), unary -.
// Scalars are `Scalar` (implicit from long, double and bool), so they keep their type and promote
// as in PyTorch: `ints + 1` stays I64, `ints / 2` is F32. Each returns a new tensor registered like
// any other (owned by the current scope), so the temporaries of an expression inside a
// `using (torch.NewDisposeScope())` block die with it. C# compound assignments (`a += 1`) are
// `a = a + 1`: a new tensor; the in-place forms are the methods (`a.AddScalar_(1)`).
namespace TensorRef
{
    public sealed partial class Tensor
    {
        static Tensor Self(Tensor a)
        {
            if (a == null) throw new System.ArgumentNullException("a");
            return a;
        }

        public static Tensor operator +(Tensor a, Tensor b) => Self(a).Add(b);
        public static Tensor operator -(Tensor a, Tensor b) => Self(a).Sub(b);
        public static Tensor operator *(Tensor a, Tensor b) => Self(a).Mul(b);
        public static Tensor operator /(Tensor a, Tensor b) => Self(a).Div(b);
        public static Tensor operator %(Tensor a, Tensor b) => Self(a).Remainder(b);
        public static Tensor operator -(Tensor a) => Self(a).Neg();

        public static Tensor operator +(Tensor a, Scalar s) => Self(a).AddScalar(s);
        public static Tensor operator -(Tensor a, Scalar s) => Self(a).SubScalar(s);
        public static Tensor operator *(Tensor a, Scalar s) => Self(a).MulScalar(s);
        public static Tensor operator /(Tensor a, Scalar s) => Self(a).DivScalar(s);
        public static Tensor operator %(Tensor a, Scalar s) => Self(a).RemainderScalar(s);

        public static Tensor operator +(Scalar s, Tensor a) => Self(a).AddScalar(s);
        public static Tensor operator -(Scalar s, Tensor a) => Self(a).RsubScalar(s);
        public static Tensor operator *(Scalar s, Tensor a) => Self(a).MulScalar(s);
        /// <summary>s / a: a true division, as torch's `s / a`.</summary>
        public static Tensor operator /(Scalar s, Tensor a) => Self(a).RdivScalar(s);
        public static Tensor operator %(Scalar s, Tensor a) => Self(a).RremainderScalar(s);
    }
}
