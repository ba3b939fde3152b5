// The ABI check at load time: the binding's generated TR_ABI_VERSION equals the library's, and a
// library built for another ABI version (tests/fake_abi.c, built into $TR_FAKE_ABI_DIR) or no
// library at all is refused with a clear message. Those two run this executable again as a
// child process (--probe-abi) with LD_LIBRARY_PATH pointing elsewhere.
using System;
using System.Diagnostics;
using System.IO;
using TensorRef;

namespace TensorRef.Tests
{
    static class AbiTests
    {
        /// <summary>Child mode: touch the library, print what happened, exit 0 if it loaded.</summary>
        public static int Probe()
        {
            try
            {
                Console.WriteLine("loaded ABI " + torch.AbiVersion);
                return 0;
            }
            catch (TypeInitializationException e) when (e.InnerException is LibraryLoadException)
            {
                Console.WriteLine("refused: " + e.InnerException.Message);
                return 3;
            }
        }

        static (int code, string output) RunProbe(string libDir)
        {
            // Under mono or dotnet the assembly is an argument; an SDK apphost runs by itself.
            var host = Process.GetCurrentProcess().MainModule.FileName;
            var hostName = Path.GetFileNameWithoutExtension(host);
            bool viaHost = hostName.StartsWith("mono") || hostName == "dotnet";
            var exe = typeof(AbiTests).Assembly.Location;
            var psi = new ProcessStartInfo(host, viaHost ? "\"" + exe + "\" --probe-abi" : "--probe-abi")
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            psi.EnvironmentVariables["LD_LIBRARY_PATH"] = libDir;
            using (var p = Process.Start(psi))
            {
                string output = p.StandardOutput.ReadToEnd() + p.StandardError.ReadToEnd();
                p.WaitForExit();
                return (p.ExitCode, output);
            }
        }

        [Test]
        static void LoadedLibrary_HasTheBindingsAbiVersion()
        {
            Check.Equal(torch.BindingAbiVersion, torch.AbiVersion, "tr_abi_version() vs the generated constant");
            Check.True(torch.Version.Contains("(ABI " + torch.AbiVersion + ";"), "tr_version names the ABI: " + torch.Version);
        }

        [Test]
        static void MismatchedLibrary_IsRefusedWithAClearMessage()
        {
            var dir = Environment.GetEnvironmentVariable("TR_FAKE_ABI_DIR");
            Check.True(dir != null && File.Exists(Path.Combine(dir, "libtensorref.so")),
                       "TR_FAKE_ABI_DIR names the folder of the stand-in library (make test-dotnet sets it)");
            var r = RunProbe(dir);
            Check.Equal(3, r.code, "the probe's exit code (output: " + r.output.Trim() + ")");
            Check.True(r.output.Contains("ABI mismatch"), "says ABI mismatch: " + r.output);
            Check.True(r.output.Contains("generated for ABI " + torch.BindingAbiVersion), "names the binding's ABI: " + r.output);
            Check.True(r.output.Contains("reports ABI 999"), "names the library's ABI: " + r.output);
        }

        [Test]
        static void MissingLibrary_IsRefusedWithAClearMessage()
        {
            var empty = Path.Combine(Path.GetTempPath(), "tensorref-no-lib-" + Process.GetCurrentProcess().Id);
            Directory.CreateDirectory(empty);
            try
            {
                var r = RunProbe(empty);
                Check.Equal(3, r.code, "the probe's exit code (output: " + r.output.Trim() + ")");
                Check.True(r.output.Contains("could not be loaded") && r.output.Contains("LD_LIBRARY_PATH"),
                           "says where to look: " + r.output);
            }
            finally
            {
                Directory.Delete(empty);
            }
        }
    }
}
