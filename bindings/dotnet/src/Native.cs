// The hand-written half of the P/Invoke layer: loading the library, the ABI check, the one error
// path (Check) and C strings. Every declaration of the C ABI (functions, structs, enums, the
// callback type, the ABI version) is generated from the header into the other half, Native.g.cs.
//
// Loading: [DllImport("tensorref")] resolves to libtensorref.so through the platform loader, so
// the library's folder must be on LD_LIBRARY_PATH (mk/dotnet.mk sets it to target/debug). That
// works for Mono and for the .NET SDK alike; no Mono-only dllmap config is needed.
//
// The static constructor checks the library's ABI version against the header this binding was
// generated from and refuses a mismatch before any other call is made.
//
// The demonstration model's add-on assembly (TensorRef.MiniLM, bindings/dotnet/minilm) uses this
// error path and C strings, hence InternalsVisibleTo.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;

[assembly: InternalsVisibleTo("TensorRef.MiniLM")]

namespace TensorRef
{
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
                    "(make gen) against the library's header.",
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
}
