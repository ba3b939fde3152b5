// Scalar: a scalar argument that keeps its type, the C ABI's tr_scalar passed by value. Ops
// promote it with the tensor as PyTorch promotes a Python number: an integer keeps an integer
// tensor's dtype (`ints + 1` is I64, exact to 64 bits), a double makes an integer tensor F32 and
// never widens a floating one, a bool is a bool.
using System;
using System.Globalization;

namespace TensorRef
{
    /// <summary>
    /// A typed scalar (tr_scalar): an integer, a floating-point number or a bool. Its fields (Kind
    /// says which of I, F, B holds the value) are tr_scalar's, generated into Native.g.cs.
    /// </summary>
    public partial struct Scalar : IEquatable<Scalar>
    {
        Scalar(ScalarKind kind, long i, double f, bool b)
        {
            Kind = kind;
            I = i;
            F = f;
            B = b;
        }

        public static implicit operator Scalar(long v) => new Scalar(ScalarKind.Int, v, 0, false);
        public static implicit operator Scalar(double v) => new Scalar(ScalarKind.Float, 0, v, false);
        public static implicit operator Scalar(bool v) => new Scalar(ScalarKind.Bool, 0, 0, v);

        /// <summary>The value as a long (a float is truncated toward zero).</summary>
        public long ToInt64() => Kind == ScalarKind.Int ? I : Kind == ScalarKind.Bool ? (B ? 1 : 0) : (long)F;

        /// <summary>The value as a double (an integer beyond 2^53 rounds).</summary>
        public double ToDouble() => Kind == ScalarKind.Float ? F : Kind == ScalarKind.Bool ? (B ? 1 : 0) : I;

        /// <summary>The value as a bool (nonzero is true).</summary>
        public bool ToBoolean() => Kind == ScalarKind.Bool ? B : Kind == ScalarKind.Int ? I != 0 : F != 0;

        public bool Equals(Scalar other) =>
            Kind == other.Kind && (Kind == ScalarKind.Int ? I == other.I
                                   : Kind == ScalarKind.Bool ? B == other.B : F.Equals(other.F));

        public override bool Equals(object obj) => obj is Scalar s && Equals(s);

        public override int GetHashCode() => Kind == ScalarKind.Int ? I.GetHashCode()
                                           : Kind == ScalarKind.Bool ? B.GetHashCode() : F.GetHashCode();

        public override string ToString() => Kind == ScalarKind.Int ? I.ToString(CultureInfo.InvariantCulture)
                                           : Kind == ScalarKind.Bool ? (B ? "true" : "false")
                                           : F.ToString("R", CultureInfo.InvariantCulture);
    }
}
