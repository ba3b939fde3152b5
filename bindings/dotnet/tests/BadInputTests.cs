// Bad input through the .NET API: each error must arrive as an exception carrying the library's
// status and its tr_last_error message (or, for what the binding checks itself, the usual .NET
// argument exceptions), and a failed call must leave no handle behind.
using System;
using TensorRef;

namespace TensorRef.Tests
{
    static class BadInputTests
    {
        [Test]
        static void DisposedTensor_UseIsStaleHandle()
        {
            var t = Helpers.Small();
            var u = Helpers.Small();
            t.Dispose();
            Check.True(t.IsDisposed, "IsDisposed after Dispose");
            var e = Check.Throws(Status.StaleHandle, () => t.Add(u), "Add on a disposed tensor");
            Check.Equal("tr_tensor_add", e.Function, "the failing C function");
            Check.True(e.LibraryMessage.Contains("stale"), "the library's message says stale: " + e.LibraryMessage);
            Check.True(e.Message.Contains("tr_tensor_add") && e.Message.Contains(e.LibraryMessage), "Message has function and text");
            Check.Throws(Status.StaleHandle, () => u.Add(t), "a disposed tensor as the argument");
            Check.Throws(Status.StaleHandle, () => { var s = t.Shape; }, "Shape of a disposed tensor");
            Check.Throws(Status.StaleHandle, () => t.ToArray<float>(), "ToArray of a disposed tensor");
            Check.Throws(Status.StaleHandle, () => torch.Cat(new[] { u, t }, 0), "a disposed tensor in a list");
            u.Dispose();
        }

        [Test]
        static void TensorOfDisposedScope_UseIsStaleHandle()
        {
            Tensor t;
            using (torch.NewDisposeScope())
                t = Helpers.Small();
            Check.True(!t.IsDisposed, "the object itself was not disposed");
            var e = Check.Throws(Status.StaleHandle, () => t.Neg(), "Neg on a tensor its scope released");
            Check.True(e.LibraryMessage.Contains("scope"), "the message mentions the scope: " + e.LibraryMessage);
        }

        [Test]
        static void StaleHandle_StaysStaleAfterItsSlotIsReused()
        {
            var t = Helpers.Small();
            ulong oldId = t.Id;
            t.Dispose();
            var reuse = new Tensor[8];
            for (int i = 0; i < reuse.Length; i++) reuse[i] = Helpers.Small();
            Check.Throws(Status.StaleHandle, () => t.Neg(), "the old handle after its slot was reused");
            Check.Equal(oldId, t.Id, "the disposed object kept its id");
            foreach (var r in reuse) Check.True(r.IsValid, "the new handles are untouched");
            foreach (var r in reuse) r.Dispose();
        }

        [Test]
        static void DisposedScope_MutationsAreScopeDisposed()
        {
            var t = Helpers.Small();
            var d = torch.NewDisposeScope();
            d.Dispose();
            Check.True(d.IsDisposed, "IsDisposed");
            var e = Check.Throws(Status.ScopeDisposed, () => d.Attach(t), "Attach to a disposed scope");
            Check.Equal("tr_scope_attach", e.Function, "function");
            Check.Throws(Status.ScopeDisposed, () => d.Detach(t), "Detach from a disposed scope");
            Check.Throws(Status.ScopeDisposed, () => d.MoveToOuter(t), "MoveToOuter of a disposed scope");
            Check.Throws(Status.ScopeDisposed, () => d.DisposeEverything(), "DisposeEverything");
            Check.Throws(Status.ScopeDisposed, () => d.DisposeEverythingBut(t), "DisposeEverythingBut");
            Check.Throws(Status.ScopeDisposed, () => { var n = d.DisposablesCount; }, "DisposablesCount");
            Check.Throws(Status.ScopeDisposed, () => d.Contains(t), "Contains");
            Check.Throws(Status.ScopeDisposed, () => t.MoveToOtherDisposeScope(d), "moving a tensor into it");
            Check.True(t.OwningDisposeScope == null, "the failed move changed nothing");
            d.Dispose();  // a second dispose is a no-op
            Check.True(t.IsValid, "the tensor is unaffected");
            t.Dispose();
        }

        [Test]
        static void ShapeMismatch_IsShapeWithLibtorchText()
        {
            var a = torch.Ones(new long[] { 4 });
            var b = torch.Ones(new long[] { 3 });
            long live = torch.LiveHandles;
            var e = Check.Throws(Status.Shape, () => a.Add(b), "adding [4] and [3]");
            Check.True(e.LibraryMessage.Contains("size of tensor"), "libtorch's explanation: " + e.LibraryMessage);
            Check.Equal(live, torch.LiveHandles, "the failed op registered nothing");
            var m = torch.Ones(new long[] { 2, 3 });
            Check.Throws(Status.Shape, () => m.Matmul(m), "matmul of [2,3] by [2,3]");
            Check.Throws(Status.Shape, () => torch.Tensor(new float[] { 1, 2, 3 }, 2, 2), "3 values for a [2,2] tensor");
            Check.Throws(Status.Shape, () => a.Item(), "Item of a 4-element tensor");
            a.Dispose(); b.Dispose(); m.Dispose();
        }

        [Test]
        static void WrongDtype_IsReported()
        {
            var i = torch.Tensor(new long[] { 1, 2 });
            Check.Throws<ArgumentException>(() => i.ToArray<float>(), "ToArray<float> of an I64 tensor");
            var logits = torch.Zeros(new long[] { 2, 3 });
            var targets = torch.Zeros(new long[] { 2, 3 }, DType.I32);
            var e = Check.Throws<TensorRefException>(() => logits.CrossEntropy(targets), "class targets of the wrong dtype");
            Check.True(e.Status == Status.DType || e.Status == Status.Torch, "a dtype or torch error, got " + e.Status);
            i.Dispose(); logits.Dispose(); targets.Dispose();
        }

        [Test]
        static void InvalidArguments_AreInvalidArg()
        {
            Check.Throws(Status.InvalidArg, () => torch.Zeros(new long[] { 2 }, (DType)99), "an unknown dtype code");
            Check.Throws(Status.InvalidArg, () => torch.Tensor(new float[0], 0, -1), "a negative dimension for copied data");
            Check.Throws(Status.Shape, () => torch.Zeros(new long[] { -2 }), "a negative dimension libtorch rejects");
        }

        [Test]
        static void NullArguments_AreArgumentNullException()
        {
            var t = Helpers.Small();
            Check.Throws<ArgumentNullException>(() => t.Add(null), "Add(null)");
            Tensor nothing = null;
            Check.Throws<ArgumentNullException>(() => GC.KeepAlive(-nothing), "-null");
            Check.Throws<ArgumentNullException>(() => GC.KeepAlive(nothing * 2), "null * 2");
            Check.Throws<ArgumentNullException>(() => GC.KeepAlive(t + nothing), "t + null");
            Check.Throws<ArgumentNullException>(() => torch.Zeros(null), "Zeros(null)");
            Check.Throws<ArgumentNullException>(() => torch.Cat(null, 0), "Cat(null)");
            Check.Throws<ArgumentNullException>(() => torch.Cat(new[] { t, null }, 0), "a null in a list");
            t.Dispose();
        }

        [Test]
        static void LastError_IsPerThread()
        {
            var a = torch.Ones(new long[] { 4 });
            var b = torch.Ones(new long[] { 3 });
            var here = Check.Throws(Status.Shape, () => a.Add(b), "a shape error on this thread");
            string other = null;
            var th = new System.Threading.Thread(() =>
            {
                try { a.Item(); }
                catch (TensorRefException e) { other = e.LibraryMessage; }
            });
            th.Start();
            th.Join();
            Check.True(other != null && other != here.LibraryMessage, "the other thread failed with its own message: " + other);
            Check.Equal(here.LibraryMessage, Helpers.LastError(), "tr_last_error on this thread after the other thread's error");
            a.Dispose(); b.Dispose();
        }
    }
}
