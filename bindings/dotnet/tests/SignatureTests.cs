// Every P/Invoke declaration of the binding (hand-written in Native.cs and generated in Ops.g.cs;
// the model add-on's in NativeMiniLM.g.cs of TensorRef.MiniLM.dll) against its prototype in the
// committed headers include/tensorref.h and include/tensorref_minilm.h: the function exists, the
// parameter count matches, and each C type is marshalled by a C# type of the same size and
// passing convention. A hand-copied declaration that drifted from the header fails here, not as
// a corrupted stack at run time. A `bool` return must be marshalled as one byte. Every residency,
// weights and model function and tr_tensor_release_many must be bound, the model's by the add-on
// alone (the core assembly declares none). (The structs passed by
// pointer and the callback type are checked field by field in HeaderLayoutTests.)
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;
using TensorRef;

namespace TensorRef.Tests
{
    static class SignatureTests
    {
        // C type (as written in the header, names dropped) -> the C# parameter types that marshal it.
        static readonly Dictionary<string, string[]> Params = new Dictionary<string, string[]>
        {
            { "struct tr_tensor", new[] { "TensorHandle", "UInt64" } },
            { "struct tr_scope", new[] { "ScopeHandle", "UInt64" } },
            { "struct tr_tensor *", new[] { "UInt64&", "UInt64[]" } },
            { "struct tr_minilm *", new[] { "MiniLMHandle", "IntPtr" } },
            { "const struct tr_minilm *", new[] { "MiniLMHandle", "IntPtr" } },
            { "struct tr_minilm **", new[] { "IntPtr&" } },
            { "const struct tr_minilm_options *", new[] { "NativeMiniLMOptions&" } },
            { "struct tr_minilm_options *", new[] { "NativeMiniLMOptions&" } },
            { "const char *const *", new[] { "IntPtr[]" } },
            { "float *", new[] { "Single[]" } },
            { "uint64_t *", new[] { "UInt64&" } },
            { "struct tr_scope *", new[] { "UInt64&" } },
            { "const struct tr_tensor *", new[] { "UInt64[]" } },
            { "struct tr_stats *", new[] { "NativeStats&" } },
            { "const int64_t *", new[] { "Int64[]" } },
            { "int64_t *", new[] { "Int64[]", "Int64&" } },
            // Optional values of the ops generated from libtorch's schema: an array of one, or null.
            { "const double *", new[] { "Double[]" } },
            { "const bool *", new[] { "Boolean[]" } },
            { "const tr_dtype *", new[] { "DType[]" } },
            { "const tr_scalar *", new[] { "Scalar[]" } },
            { "int64_t", new[] { "Int64" } },
            { "uint64_t", new[] { "UInt64" } },
            { "int32_t", new[] { "Int32" } },
            { "size_t", new[] { "UIntPtr" } },
            { "size_t *", new[] { "UIntPtr&" } },
            { "double", new[] { "Double" } },
            { "double *", new[] { "Double&" } },
            { "bool", new[] { "Boolean/I1" } },
            { "bool *", new[] { "Boolean&/I1" } },
            { "tr_dtype", new[] { "DType" } },
            { "tr_dtype *", new[] { "DType&" } },
            { "tr_device", new[] { "Device" } },
            { "tr_device *", new[] { "Device&" } },
            { "char *", new[] { "Byte[]" } },
            { "const uint8_t *", new[] { "IntPtr" } },
            { "uint8_t *", new[] { "IntPtr" } },
            { "const char *", new[] { "Byte[]" } },
            { "void *", new[] { "IntPtr" } },
            { "const struct tr_residency_config *", new[] { "NativeResidencyConfig&" } },
            { "struct tr_residency_config *", new[] { "NativeResidencyConfig&" } },
            { "struct tr_residency_stats *", new[] { "NativeResidencyStats&" } },
            { "struct tr_device_memory *", new[] { "NativeDeviceMemory&" } },
            { "struct tr_schedule_model *", new[] { "NativeScheduleModel&" } },
            { "tr_event_fn", new[] { "NativeEventFn" } },
            { "struct tr_scalar", new[] { "Scalar" } },
            { "struct tr_scalar *", new[] { "Scalar&" } },
            { "int32_t *", new[] { "Int32&" } },
            { "void **", new[] { "IntPtr&" } },
            { "tr_weight_mode", new[] { "WeightMode" } },
            // The ops header (cbindgen on src/ffi/ops_generated.rs alone) names the structs by their typedefs.
            { "tr_tensor", new[] { "TensorHandle", "UInt64" } },
            { "tr_tensor *", new[] { "UInt64&", "UInt64[]" } },
            { "const tr_tensor *", new[] { "UInt64[]" } },
            { "tr_scalar", new[] { "Scalar" } },
        };

        static readonly Dictionary<string, string> Returns = new Dictionary<string, string>
        {
            { "tr_status", "Status" }, { "const char *", "IntPtr" }, { "uint32_t", "UInt32" },
            { "uint64_t", "UInt64" }, { "size_t", "UIntPtr" }, { "bool", "Boolean/I1" },
        };

        /// <summary>include/tensorref.h, the ops header it includes, and the model add-on's header.</summary>
        internal static string HeaderText()
        {
            for (var dir = new DirectoryInfo(Path.GetDirectoryName(typeof(SignatureTests).Assembly.Location));
                 dir != null; dir = dir.Parent)
            {
                var path = Path.Combine(dir.FullName, "include", "tensorref.h");
                if (File.Exists(path))
                    return File.ReadAllText(path) + File.ReadAllText(Path.Combine(dir.FullName, "include", "tensorref_ops.h")) +
                           File.ReadAllText(Path.Combine(dir.FullName, "include", "tensorref_minilm.h"));
            }
            throw new CheckFailed("include/tensorref.h not found above " + typeof(SignatureTests).Assembly.Location);
        }

        /// <summary>name -> (return type, parameter types) of every function the header declares.</summary>
        static Dictionary<string, Tuple<string, string[]>> Prototypes()
        {
            var protos = new Dictionary<string, Tuple<string, string[]>>();
            var rx = new Regex(@"^(tr_status|const char \*|uint32_t|uint64_t|size_t|bool)\s*(tr_\w+)\(([^)]*)\);", RegexOptions.Multiline);
            foreach (Match m in rx.Matches(HeaderText()))
            {
                var args = Regex.Replace(m.Groups[3].Value, @"\s+", " ").Trim();
                var types = args == "void" || args == "" ? new string[0]
                    : args.Split(',').Select(a => Regex.Replace(a.Trim(), @"\s*\b\w+$", "").Replace(" *", " *").Trim()).ToArray();
                protos[m.Groups[2].Value] = Tuple.Create(m.Groups[1].Value, types);
            }
            return protos;
        }

        static string CsType(ParameterInfo p)
        {
            var name = p.ParameterType.Name;
            var ma = p.GetCustomAttribute<MarshalAsAttribute>();
            return ma != null && ma.Value == UnmanagedType.I1 ? name + "/I1" : name;
        }

        [Test]
        static void EveryPInvoke_MatchesItsHeaderPrototype()
        {
            var protos = Prototypes();
            Check.True(protos.Count > 100, "the header's prototypes were parsed (" + protos.Count + ")");
            Func<Type, List<MethodInfo>> pinvokes = t => t.GetMethods(BindingFlags.Static | BindingFlags.NonPublic | BindingFlags.Public)
                                                          .Where(m => (m.Attributes & MethodAttributes.PinvokeImpl) != 0).ToList();
            var core = pinvokes(typeof(torch).Assembly.GetType("TensorRef.Native", true));
            var addOn = pinvokes(typeof(MiniLM).Assembly.GetType("TensorRef.NativeMiniLM", true));
            Check.True(core.Count > 100, "Native's P/Invoke methods were found (" + core.Count + ")");
            Check.True(addOn.Count >= 7, "NativeMiniLM's P/Invoke methods were found (" + addOn.Count + ")");
            var coreModel = core.Where(m => m.Name.StartsWith("tr_minilm_")).Select(m => m.Name).ToList();
            Check.True(coreModel.Count == 0, "the core assembly declares no model function: " + string.Join(", ", coreModel));
            var methods = core.Concat(addOn).ToList();
            var problems = new List<string>();
            foreach (var m in methods)
            {
                var import = m.GetCustomAttribute<DllImportAttribute>();
                string entry = import != null && !string.IsNullOrEmpty(import.EntryPoint) ? import.EntryPoint : m.Name;
                Tuple<string, string[]> proto;
                if (!protos.TryGetValue(entry, out proto))
                {
                    problems.Add(m.Name + ": " + entry + " is not in include/tensorref.h");
                    continue;
                }
                var ret = m.ReturnParameter.GetCustomAttribute<MarshalAsAttribute>();
                var retType = m.ReturnType.Name + (ret != null && ret.Value == UnmanagedType.I1 ? "/I1" : "");
                if (Returns[proto.Item1] != retType)
                    problems.Add(m.Name + ": returns " + retType + ", the header says " + proto.Item1 + " (" + Returns[proto.Item1] + ")");
                var ps = m.GetParameters();
                if (ps.Length != proto.Item2.Length)
                {
                    problems.Add(m.Name + ": " + ps.Length + " parameters, the header has " + proto.Item2.Length);
                    continue;
                }
                for (int i = 0; i < ps.Length; i++)
                {
                    string[] ok;
                    if (!Params.TryGetValue(proto.Item2[i], out ok))
                        problems.Add(m.Name + ": parameter " + i + " has C type '" + proto.Item2[i] + "', unknown to this test");
                    else if (!ok.Contains(CsType(ps[i])))
                        problems.Add(m.Name + ": parameter " + i + " (" + ps[i].Name + ") is " + CsType(ps[i]) +
                                     ", the header's " + proto.Item2[i] + " needs " + string.Join(" or ", ok));
                }
            }
            Check.True(problems.Count == 0, "every P/Invoke matches the header:\n" + string.Join("\n", problems));
            var bound = new HashSet<string>(methods.Select(m => m.GetCustomAttribute<DllImportAttribute>()?.EntryPoint ?? m.Name));
            var unbound = protos.Keys.Where(k => !bound.Contains(k)).OrderBy(k => k).ToList();
            var required = unbound.Where(k => k.StartsWith("tr_residency_") || k.EndsWith("_resident") || k.StartsWith("tr_weights_") ||
                                              k.StartsWith("tr_minilm_") || k == "tr_tensor_release_many").ToList();
            Check.True(required.Count == 0, "every residency, weights and model function and tr_tensor_release_many is bound; missing: " +
                       string.Join(", ", required));
            foreach (var f in new[] { "tr_residency_enabled", "tr_tensor_release_many", "tr_weights_load", "tr_minilm_embed" })
                Check.True(protos.ContainsKey(f), f + "'s prototype was parsed from the header");
            if (unbound.Count > 0)
                Console.WriteLine("     (not bound in .NET yet: " + string.Join(", ", unbound) + ")");
        }
    }
}
