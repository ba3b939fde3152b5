// The scope operations beyond the numbered facts: DisposeEverything(But), MoveToOuter between
// nested scopes, MoveToOther, out-of-order disposal (TorchSharp #1303), moving into one's own
// scope (TorchSharp loses the handle there), and the current-scope query.
using System;
using TensorRef;

namespace TensorRef.Tests
{
    static class ScopeApiTests
    {
        [Test]
        static void DisposeEverything_KeepsTheScopeOpenAndCapturing()
        {
            using (var d = torch.NewDisposeScope())
            {
                var a = Helpers.Small();
                var b = Helpers.Small();
                d.DisposeEverything();
                Check.True(!a.IsValid && !b.IsValid, "owned tensors released");
                Check.Equal(0L, d.DisposablesCount, "empty");
                var c = Helpers.Small();
                Check.True(d.Contains(c), "still capturing");
                Check.True(ReferenceEquals(d, DisposeScopeManager.CurrentDisposeScope), "still current");
            }
        }

        [Test]
        static void DisposeEverythingBut_KeepsOwnedOnes_LeavesForeignOnesAlone()
        {
            var foreign = Helpers.Small();
            Tensor keep, drop;
            using (var d = torch.NewDisposeScope())
            {
                keep = Helpers.Small();
                drop = Helpers.Small();
                d.DisposeEverythingBut(keep, foreign);
                Check.True(keep.IsValid && !drop.IsValid, "kept one alive, the other released");
                Check.True(d.Contains(keep), "the kept tensor stays owned");
                Check.True(!d.Contains(foreign), "a foreign tensor in keep is not adopted");
            }
            Check.True(!keep.IsValid, "the kept tensor died with the scope");
            Check.True(foreign.IsValid, "the foreign tensor is untouched");
            foreign.Dispose();
        }

        [Test]
        static void MoveToOuter_GoesOneScopeOut()
        {
            using (var outer = torch.NewDisposeScope())
            {
                Tensor t, u;
                using (var inner = torch.NewDisposeScope())
                {
                    t = Helpers.Small().MoveToOuterDisposeScope();
                    u = inner.MoveToOuter(Helpers.Small());
                    Check.True(outer.Contains(t) && outer.Contains(u), "both owned by the outer scope");
                }
                Check.True(t.IsValid && u.IsValid, "they survive the inner scope");
                Check.Equal(2L, outer.DisposablesCount, "outer owns two");
            }
        }

        [Test]
        static void MoveToOther_OnlyWhenThisScopeOwnsIt()
        {
            using (var a = torch.NewDisposeScope())
            {
                var mine = Helpers.Small();
                using (var b = torch.NewDisposeScope())
                {
                    var theirs = Helpers.Small();
                    b.MoveToOther(a, theirs);
                    Check.True(a.Contains(theirs), "b handed its tensor to a");
                    b.MoveToOther(null, mine);
                    Check.True(a.Contains(mine), "b cannot move a tensor it does not own");
                }
            }
        }

        [Test]
        static void MoveToOwnScope_IsANoOp()
        {
            using (var d = torch.NewDisposeScope())
            {
                var t = Helpers.Small();
                t.MoveToOtherDisposeScope(d);
                Check.True(d.Contains(t), "still owned (TorchSharp loses it here)");
                Check.Equal(1L, d.DisposablesCount, "counted once");
            }
        }

        [Test]
        static void OutOfOrderDispose_LaterHandlesGoToTheCurrentScope()
        {
            var outer = torch.NewDisposeScope();
            var middle = torch.NewDisposeScope();
            var inner = torch.NewDisposeScope();
            var inMiddle = middle.Attach(Helpers.Small());
            middle.Dispose();  // not the innermost
            Check.True(!inMiddle.IsValid, "its handles are released");
            Check.True(ReferenceEquals(inner, DisposeScopeManager.CurrentDisposeScope), "the current scope did not change");
            var later = Helpers.Small();
            Check.True(inner.Contains(later), "later handles go to the current scope (TorchSharp #1303 leaked them)");
            var up = Helpers.Small().MoveToOuterDisposeScope();
            Check.True(outer.Contains(up), "inner's outer is now the outer scope");
            inner.Dispose();
            Check.True(!later.IsValid && up.IsValid, "inner released its own");
            outer.Dispose();
            Check.True(!up.IsValid, "outer released the moved one");
            Check.True(DisposeScopeManager.CurrentDisposeScope == null, "no scope open");
        }

        [Test]
        static void DisposeScope_UsingBlock_DisposesOnException()
        {
            Tensor t = null;
            try
            {
                using (torch.NewDisposeScope())
                {
                    t = Helpers.Small();
                    throw new InvalidOperationException("boom");
                }
            }
            catch (InvalidOperationException) { }
            Check.True(!t.IsValid, "the scope released its tensor on the exception path");
            Check.True(DisposeScopeManager.CurrentDisposeScope == null, "and closed");
        }
        [Test]
        static void MovesBetweenScopes_ChangeNoCounter()
        {
            using (var a = torch.NewDisposeScope())
            {
                var t = Helpers.Small();
                using (var b = torch.NewDisposeScope())
                {
                    b.Attach(t);
                    Check.True(b.Contains(t) && !a.Contains(t), "attached from A to B");
                    t.MoveToOuterDisposeScope();
                    Check.True(a.Contains(t), "moved back out to A");
                    t.MoveToOtherDisposeScope(b);
                    b.MoveToOuter(t);
                    Check.Stats(0, 0, 1, 0, 0, 0, 1, "after four moves between scopes");
                }
                Check.True(t.IsValid, "A owns it, B's end did not release it");
            }
        }

        [Test]
        static void DisposeEverythingBut_WithADeadKeep_ReleasesNothing()
        {
            using (var d = torch.NewDisposeScope())
            {
                var a = Helpers.Small();
                var dead = Helpers.Small();
                dead.Dispose();
                Check.Throws(Status.StaleHandle, () => d.DisposeEverythingBut(a, dead), "a released tensor in keep");
                Check.True(a.IsValid, "nothing was released");
                Check.Equal(1L, d.DisposablesCount, "the scope still owns a");
                Check.True(!d.Contains(dead), "Contains of a released tensor is false, not an error");
            }
        }

        [Test]
        static void DisposeOnAnotherThread_CountsThere()
        {
            Tensor t;
            using (var d = torch.NewDisposeScope())
            {
                t = Helpers.Small();
                ScopeStats other = default(ScopeStats);
                var th = new System.Threading.Thread(() =>
                {
                    DisposeScopeManager.Statistics.Reset();
                    t.Dispose();
                    other = DisposeScopeManager.Statistics.Snapshot();
                });
                th.Start();
                th.Join();
                Check.Equal("(0,0,0,1,0,0,-1)", other.ToString(), "the disposing thread counted a dispose in scope");
                Check.Equal(0L, d.DisposablesCount, "and the owning scope lost it");
                Check.Stats(0, 0, 1, 0, 0, 0, 1, "this thread's counters are unchanged");
            }
        }
    }
}
