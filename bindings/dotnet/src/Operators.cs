// The C# operators of Tensor: + - * / between tensors and with scalars (either side), unary -.
// Each returns a new tensor registered like any other (owned by the current scope), so the
// temporaries of an expression inside a `using (torch.NewDisposeScope())` block die with it.
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
        public static Tensor operator -(Tensor a) => Self(a).Neg();

        public static Tensor operator +(Tensor a, double s) => Self(a).AddScalar(s);
        public static Tensor operator -(Tensor a, double s) => Self(a).SubScalar(s);
        public static Tensor operator *(Tensor a, double s) => Self(a).MulScalar(s);
        public static Tensor operator /(Tensor a, double s) => Self(a).DivScalar(s);

        public static Tensor operator +(double s, Tensor a) => a + s;
        public static Tensor operator *(double s, Tensor a) => a * s;

        /// <summary>s - a, as (-a) + s: two new handles, the first a temporary.</summary>
        public static Tensor operator -(double s, Tensor a)
        {
            using (var neg = -a) return neg + s;
        }

        /// <summary>s / a, as a^-1 * s: two new handles, the first a temporary.</summary>
        public static Tensor operator /(double s, Tensor a)
        {
            using (var inv = Self(a).PowScalar(-1)) return inv * s;
        }
    }
}
