// A self-contained test runner (no NuGet offline): finds every [Test] method of this assembly by
// reflection, runs each on the main thread from a clean state (statistics reset, no scope open,
// no residency manager), fails a test that leaves a scope open, the residency manager on, or
// tr_live_handles() changed, and at the end checks, after
// forcing the finalizers, that tr_live_handles() is back to where the suite started. The last
// line is exactly "N passed, N failed"; the exit status is non-zero on any failure.
//
//   mono TensorRef.Tests.exe [substring]     run the tests whose Class.Method contains substring
//   mono TensorRef.Tests.exe --probe-abi     child mode for AbiTests: load the library, report
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using TensorRef;

namespace TensorRef.Tests
{
    [AttributeUsage(AttributeTargets.Method)]
    sealed class TestAttribute : Attribute { }

    static class Runner
    {
        static int Main(string[] args)
        {
            if (args.Length == 1 && args[0] == "--probe-abi")
                return AbiTests.Probe();

            string filter = args.Length > 0 ? args[0] : "";
            var tests = typeof(Runner).Assembly.GetTypes()
                .OrderBy(t => t.FullName, StringComparer.Ordinal)
                .SelectMany(t => t.GetMethods(BindingFlags.Static | BindingFlags.Public | BindingFlags.NonPublic)
                                  .Where(m => m.GetCustomAttribute<TestAttribute>() != null)
                                  .OrderBy(m => m.MetadataToken))
                .Where(m => (m.DeclaringType.Name + "." + m.Name).Contains(filter))
                .ToList();

            Console.WriteLine(torch.Version);
            long suiteStart = torch.LiveHandles;
            int passed = 0, failed = 0;
            foreach (var m in tests)
            {
                string name = m.DeclaringType.Name + "." + m.Name;
                string error = Run(m);
                if (error == null)
                {
                    passed++;
                    Console.WriteLine("ok   " + name);
                }
                else
                {
                    failed++;
                    Console.WriteLine("FAIL " + name + "\n     " + error.Replace("\n", "\n     "));
                }
            }

            long suiteEnd = Helpers.LiveAfterFinalizers(suiteStart);
            if (suiteEnd == suiteStart)
            {
                passed++;
                Console.WriteLine("ok   suite: tr_live_handles() back to " + suiteStart + " after GC and finalizers");
            }
            else
            {
                failed++;
                Console.WriteLine("FAIL suite: tr_live_handles() is " + suiteEnd + ", was " + suiteStart + " before the suite");
            }
            Console.WriteLine(passed + " passed, " + failed + " failed");
            return failed == 0 ? 0 : 1;
        }

        static string Run(MethodInfo m)
        {
            try
            {
                if (DisposeScopeManager.CurrentDisposeScope != null || Helpers.CurrentScopeId() != 0)
                    return "a scope was left open before this test";
                DisposeScopeManager.Statistics.Reset();
                if (ResidencyManager.Enabled)
                    return "a residency manager was left on before this test";
                long before = torch.LiveHandles;
                bool leftOn;
                try
                {
                    m.Invoke(null, null);
                }
                finally
                {
                    // Off for the next test whatever happened (also frees what it holds on the device).
                    leftOn = ResidencyManager.Enabled;
                    if (leftOn) ResidencyManager.Disable();
                }
                if (leftOn)
                    return "the test left the residency manager on";
                if (Helpers.CurrentScopeId() != 0)
                    return "the test left a scope open";
                long after = torch.LiveHandles;
                if (after != before)
                    return "tr_live_handles() went from " + before + " to " + after + ": the test leaked handles";
                return null;
            }
            catch (TargetInvocationException e)
            {
                return Describe(e.InnerException);
            }
            catch (Exception e)
            {
                return Describe(e);
            }
        }

        static string Describe(Exception e)
        {
            var frame = (e.StackTrace ?? "").Split('\n').FirstOrDefault(l => l.Contains(".Tests.") && !l.Contains("Check."));
            return e.GetType().Name + ": " + e.Message + (frame != null ? "\n" + frame.Trim() : "");
        }
    }
}
