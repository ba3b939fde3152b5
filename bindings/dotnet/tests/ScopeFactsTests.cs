// The numbered facts 1-14 of docs/dispose-scopes.md, one test each, through the .NET API.
// Statistics tuples are (created_outside, disposed_outside, created_in, disposed_in, attached,
// detached, live), counted from a reset with no scope open (the runner resets before each test).
using System;
using System.Collections.Generic;
using TensorRef;

namespace TensorRef.Tests
{
    static class ScopeFactsTests
    {
        [Test]
        static void Fact01_CreateInScope_AttachToOwnScopeChangesNothing()
        {
            using (var d = torch.NewDisposeScope())
            {
                var t = Helpers.Small();
                Check.Stats(0, 0, 1, 0, 0, 0, 1, "after creating in a scope");
                Check.True(d.Contains(t), "the scope owns the new tensor");
                d.Attach(t);
                Check.Stats(0, 0, 1, 0, 0, 0, 1, "after attaching to the scope it is already in");
                Check.Equal(1L, d.DisposablesCount, "scope size");
            }
        }

        [Test]
        static void Fact02_DetachThenDisposeScope_HandleSurvives()
        {
            Tensor t;
            using (var d = torch.NewDisposeScope())
            {
                t = Helpers.Small();
                d.Attach(t);
                d.Detach(t);
                Check.Stats(0, 0, 1, 0, 0, 1, 1, "after detach");
                Check.True(!d.Contains(t), "the scope no longer owns it");
            }
            Check.Stats(0, 0, 1, 0, 0, 1, 1, "after disposing the scope");
            Check.True(t.IsValid, "the detached handle is alive");
            Check.True(t.OwningDisposeScope == null, "no owner");
            t.Dispose();
        }

        [Test]
        static void Fact03_DisposeHandleInScope_SecondDisposeChangesNothing()
        {
            using (var d = torch.NewDisposeScope())
            {
                var t = Helpers.Small();
                t.Dispose();
                Check.Stats(0, 0, 1, 1, 0, 0, 0, "after disposing the handle");
                Check.Equal(0L, d.DisposablesCount, "the disposed handle left the scope");
                t.Dispose();
                Check.Stats(0, 0, 1, 1, 0, 0, 0, "after a second dispose");
            }
            Check.Stats(0, 0, 1, 1, 0, 0, 0, "after the scope");
        }

        [Test]
        static void Fact04_DisposeScope_DisposesItsHandle()
        {
            Tensor t;
            using (torch.NewDisposeScope())
                t = Helpers.Small();
            Check.Stats(0, 0, 1, 1, 0, 0, 0, "after disposing the scope");
            Check.True(!t.IsValid, "the handle died with its scope");
            t.Dispose();  // the C# object's own Dispose afterwards is harmless
            Check.Stats(0, 0, 1, 1, 0, 0, 0, "after disposing the dead tensor object");
        }

        [Test]
        static void Fact05_CreateAndDisposeOutside()
        {
            var t = Helpers.Small();
            Check.Stats(1, 0, 0, 0, 0, 0, 1, "after creating outside");
            t.Dispose();
            Check.Stats(1, 1, 0, 0, 0, 0, 0, "after disposing");
        }

        [Test]
        static void Fact06a_AttachOutsideHandle_ThenDisposeHandle()
        {
            var t = Helpers.Small();
            using (var d = torch.NewDisposeScope())
            {
                d.Attach(t);
                Check.Stats(1, 0, 0, 0, 1, 0, 1, "after attach");
                t.Dispose();
                Check.Stats(1, 0, 0, 1, 1, 0, 0, "after disposing the handle");
            }
            Check.Stats(1, 0, 0, 1, 1, 0, 0, "after the scope");
        }

        [Test]
        static void Fact06b_AttachOutsideHandle_ThenDisposeScope()
        {
            var t = Helpers.Small();
            using (var d = torch.NewDisposeScope())
            {
                d.Attach(t);
                Check.Stats(1, 0, 0, 0, 1, 0, 1, "after attach");
            }
            Check.Stats(1, 0, 0, 1, 1, 0, 0, "after disposing the scope");
            Check.True(!t.IsValid, "the attached handle died with the scope");
        }

        [Test]
        static void Fact07_AttachThenDetach_ScopeDisposeChangesNothing()
        {
            var t = Helpers.Small();
            using (var d = torch.NewDisposeScope())
            {
                d.Attach(t);
                d.Detach(t);
                Check.Stats(1, 0, 0, 0, 1, 1, 1, "after attach and detach");
            }
            Check.Stats(1, 0, 0, 0, 1, 1, 1, "after the scope");
            Check.True(t.IsValid, "alive");
            t.Dispose();
        }

        [Test]
        static void Fact08_DetachUnownedHandle_ChangesNothing()
        {
            var t = Helpers.Small();
            t.DetachFromDisposeScope();
            Check.Stats(1, 0, 0, 0, 0, 0, 1, "after detaching an unowned handle");
            using (var d = torch.NewDisposeScope())
            {
                d.Detach(t);
                Check.Stats(1, 0, 0, 0, 0, 0, 1, "after scope.Detach of a handle it does not own");
            }
            t.Dispose();
        }

        [Test]
        static void Fact09_UnrelatedScope_LeavesAttachedHandleAlone()
        {
            var t = Helpers.Small();
            using (var a = torch.NewDisposeScope())
            {
                a.Attach(t);
                Check.Stats(1, 0, 0, 0, 1, 0, 1, "after attach to A");
                using (torch.NewDisposeScope()) { }
                Check.Stats(1, 0, 0, 0, 1, 0, 1, "after opening and disposing B");
                Check.True(a.Contains(t), "A still owns it");
                Check.True(ReferenceEquals(a, t.OwningDisposeScope), "OwningDisposeScope is A");
            }
            Check.True(!t.IsValid, "died with A");
        }

        [Test]
        static void Fact10_FourHandles_KeptDetachedMovedOutDisposed()
        {
            Tensor kept, detached, moved, byHand;
            using (var d = torch.NewDisposeScope())
            {
                kept = Helpers.Small();
                detached = Helpers.Small().DetachFromDisposeScope();
                moved = Helpers.Small().MoveToOuterDisposeScope();  // outermost scope: becomes detached
                byHand = Helpers.Small();
                byHand.Dispose();
                Check.Equal(1L, d.DisposablesCount, "only the kept handle is still owned");
            }
            var s = DisposeScopeManager.Statistics;
            Check.Equal(2L, s.ThreadTotalLiveCount, "live");
            Check.Equal(4L, s.CreatedInScopeCount, "created_in");
            Check.Equal(2L, s.DisposedInScopeCount, "disposed_in");
            Check.Equal(2L, s.DetachedFromScopeCount, "detached");
            Check.True(!kept.IsValid && !byHand.IsValid, "the kept and the hand-disposed handles are dead");
            Check.True(detached.IsValid && moved.IsValid, "the detached and moved-out handles live");
            detached.Dispose();
            moved.Dispose();
        }

        [Test]
        static void Fact11_ExpressionTemporaries_DieWithTheScope()
        {
            var x = torch.Tensor(new float[] { 1, 2, 3, 4 });
            long before = torch.LiveHandles;
            Tensor y;
            using (var d = torch.NewDisposeScope())
            {
                y = (x + 1) * 2 - x / 4;  // four new handles: x+1, (x+1)*2, x/4, and the difference
                Check.Values(new float[] { 3.75f, 5.5f, 7.25f, 9f }, y, "the expression's value");
                Check.Equal(4L, d.DisposablesCount, "every temporary is owned by the scope");
                Check.True(!d.Contains(x), "the outside tensor is not");
                Check.Equal(before + 4, torch.LiveHandles, "live handles inside");
            }
            Check.Equal(before, torch.LiveHandles, "live handles after the scope");
            Check.True(!y.IsValid, "the result died too (it was not moved out)");
            Check.Stats(1, 0, 4, 4, 0, 0, 1, "after the scope");
            Check.Values(new float[] { 1, 2, 3, 4 }, x, "the outside tensor is untouched");
            x.Dispose();
        }

        [Test]
        static void Fact12_InnerScope_RestoresLiveCount_OuterEndsAtZero()
        {
            using (torch.NewDisposeScope())
            {
                var a = Helpers.Small();
                var b = a + a;
                long liveBefore = DisposeScopeManager.Statistics.ThreadTotalLiveCount;
                Check.Equal(2L, liveBefore, "live in the outer scope");
                using (torch.NewDisposeScope())
                {
                    var c = a * b;
                    var e = -c;
                    Check.True(e.IsValid, "made in the inner scope");
                    Check.Equal(4L, DisposeScopeManager.Statistics.ThreadTotalLiveCount, "live in the inner scope");
                }
                Check.Equal(liveBefore, DisposeScopeManager.Statistics.ThreadTotalLiveCount, "live after the inner scope");
            }
            Check.Equal(0L, DisposeScopeManager.Statistics.ThreadTotalLiveCount, "live after the outer scope");
        }

        [Test]
        static void Fact13_TrainingLoopInOneScope_EndsWithNothingLive()
        {
            double first = 0, last = 0;
            using (torch.NewDisposeScope())
            {
                torch.ManualSeed(7);
                var x = torch.Randn(new long[] { 32, 4 });
                var y = (x.SumDim(new long[] { 1 }, true) * 0.5).Tanh();
                var w1 = (torch.Randn(new long[] { 16, 4 }) * 0.5).RequiresGrad_(true);
                var b1 = torch.Zeros(new long[] { 16 }).RequiresGrad_(true);
                var w2 = (torch.Randn(new long[] { 1, 16 }) * 0.5).RequiresGrad_(true);
                var b2 = torch.Zeros(new long[] { 1 }).RequiresGrad_(true);
                var ps = new[] { w1, b1, w2, b2 };
                for (int step = 0; step < 10; step++)
                {
                    var loss = x.Linear(w1, b1).Relu().Linear(w2, b2).MseLoss(y);
                    loss.Backward();
                    using (torch.NoGrad())
                    {
                        foreach (var p in ps)
                        {
                            var g = p.Grad();
                            Check.True(g != null, "every parameter has a gradient after backward");
                            p.Sub_(g * 0.1);
                            p.ClearGrad(); // dropped, as torch's zero_grad(set_to_none=True)
                            Check.True(p.Grad() == null, "no gradient once cleared");
                        }
                    }
                    if (step == 0) first = loss.Item();
                    last = loss.Item();
                }
            }
            Check.True(last < first, "the loss fell over ten steps (" + first + " -> " + last + ")");
            Check.Equal(0L, DisposeScopeManager.Statistics.ThreadTotalLiveCount, "live after the training scope");
        }

        [Test]
        static void Fact14a_MoveToScopeOfUnownedHandle_Detaches()
        {
            var other = Helpers.Small();
            Tensor t;
            using (var d = torch.NewDisposeScope())
            {
                t = Helpers.Small();
                t.MoveToOtherDisposeScope(other);
                Check.True(!d.Contains(t), "t left its scope");
                Check.True(t.OwningDisposeScope == null, "t has no owner");
                Check.Equal(1L, DisposeScopeManager.Statistics.DetachedFromScopeCount, "counted as a detach");
            }
            Check.True(t.IsValid, "t survived the scope");
            t.Dispose();
            other.Dispose();
        }

        [Test]
        static void Fact14b_MoveFromThirdToFirstScope_SurvivesThirdAndSecond()
        {
            Tensor t;
            using (var first = torch.NewDisposeScope())
            {
                using (var second = torch.NewDisposeScope())
                {
                    using (var third = torch.NewDisposeScope())
                    {
                        t = Helpers.Small();
                        Check.True(third.Contains(t), "created in the third scope");
                        t.MoveToOtherDisposeScope(first);
                        Check.True(first.Contains(t) && !third.Contains(t), "now owned by the first scope");
                    }
                    Check.True(t.IsValid, "alive after the third scope");
                }
                Check.True(t.IsValid, "alive after the second scope");
            }
            Check.True(!t.IsValid, "dead after the first scope");
        }
    }
}
