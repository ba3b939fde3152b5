// The binding's exceptions: TensorRefException for a call the library refused (its tr_status and
// tr_last_error's message), LibraryLoadException when the library cannot be used at all (missing,
// or built for another ABI version).
using System;

namespace TensorRef
{
    /// <summary>A libtensorref call returned a status other than TR_OK.</summary>
    public class TensorRefException : Exception
    {
        public TensorRefException(Status status, string function, string message)
            : base(string.Format("{0}: {1} ({2}): {3}", function, status, Native.StatusText(status), message))
        {
            Status = status;
            Function = function;
            LibraryMessage = message;
        }

        /// <summary>The tr_status the C function returned.</summary>
        public Status Status { get; }

        /// <summary>The C function that failed, e.g. "tr_tensor_add".</summary>
        public string Function { get; }

        /// <summary>The library's own message (tr_last_error) for this failure.</summary>
        public string LibraryMessage { get; }
    }

    /// <summary>libtensorref is missing or speaks another ABI version than this binding.</summary>
    public class LibraryLoadException : Exception
    {
        public LibraryLoadException(string message, Exception inner = null) : base(message, inner) { }
    }
}
