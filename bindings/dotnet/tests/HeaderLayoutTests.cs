// The structs the binding passes by pointer, and the callback type, against include/tensorref.h:
// each C# mirror has the header's fields in the header's order (snake_case -> PascalCase), each
// field marshals to the C type's size at the C offset (natural alignment, as every C compiler here
// lays them out), and the whole struct has the C size. A field added to or reordered in the header
// fails here instead of shifting every counter or setting after it.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;
using TensorRef;

namespace TensorRef.Tests
{
    static class HeaderLayoutTests
    {
        // The header's struct -> the binding's mirror (internal types of the TensorRef assembly, and
        // of TensorRef.MiniLM for the model add-on's).
        static readonly Dictionary<string, string> Mirrors = new Dictionary<string, string>
        {
            { "tr_stats", "TensorRef.NativeStats" },
            { "tr_residency_config", "TensorRef.NativeResidencyConfig" },
            { "tr_residency_stats", "TensorRef.NativeResidencyStats" },
            { "tr_device_memory", "TensorRef.NativeDeviceMemory" },
            { "tr_schedule_model", "TensorRef.NativeScheduleModel" },
            { "tr_event", "TensorRef.NativeEvent" },
            { "tr_minilm_options", "TensorRef.NativeMiniLMOptions" },
            { "tr_scalar", "TensorRef.Scalar" },
        };

        static readonly Dictionary<string, int> CSizes = new Dictionary<string, int>
        {
            { "int32_t", 4 }, { "uint32_t", 4 }, { "int64_t", 8 }, { "uint64_t", 8 }, { "bool", 1 }, { "double", 8 },
            // The C enums: int32_t underneath (typedef int32_t tr_device; before C23).
            { "tr_scalar_kind", 4 }, { "tr_device", 4 }, { "tr_policy", 4 }, { "tr_recompute", 4 }, { "tr_event_kind", 4 }, { "tr_weight_mode", 4 },
        };

        /// <summary>(C type, name) of each field of `typedef struct name { ... } name;` in the header.</summary>
        static List<Tuple<string, string>> CFields(string header, string name)
        {
            var m = Regex.Match(header, @"typedef struct " + name + @" \{(.*?)\} " + name + ";", RegexOptions.Singleline);
            if (!m.Success) throw new CheckFailed("struct " + name + " is not in include/tensorref.h");
            var body = Regex.Replace(m.Groups[1].Value, @"/\*.*?\*/", "", RegexOptions.Singleline);
            return Regex.Matches(body, @"^\s*([\w ]+?\s*\**)\s*(\w+);", RegexOptions.Multiline).Cast<Match>()
                        .Select(f => Tuple.Create(f.Groups[1].Value.Trim(), f.Groups[2].Value)).ToList();
        }

        static int CSize(string type) => type.EndsWith("*") ? IntPtr.Size : CSizes[type];

        static string Pascal(string snake) =>
            string.Concat(snake.Split('_').Select(p => p.Length == 0 ? "" : char.ToUpperInvariant(p[0]) + p.Substring(1)));

        static Type Internal(string name) =>
            typeof(torch).Assembly.GetType(name) ?? typeof(MiniLM).Assembly.GetType(name, true);

        [Test]
        static void NativeStructs_MatchTheHeaderFieldByField()
        {
            var header = SignatureTests.HeaderText();
            var problems = new List<string>();
            foreach (var pair in Mirrors)
            {
                var fields = CFields(header, pair.Key);
                Check.True(fields.Count >= 4, pair.Key + "'s fields were parsed (" + fields.Count + ")");
                var type = Internal(pair.Value);
                var mine = type.GetFields(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic)
                               .OrderBy(f => f.MetadataToken).ToList();
                if (mine.Count != fields.Count)
                {
                    problems.Add(pair.Value + " has " + mine.Count + " fields, " + pair.Key + " has " + fields.Count);
                    continue;
                }
                int offset = 0, align = 1;
                for (int i = 0; i < fields.Count; i++)
                {
                    string ctype = fields[i].Item1, cname = fields[i].Item2;
                    int size = CSize(ctype);
                    offset = (offset + size - 1) / size * size;
                    align = Math.Max(align, size);
                    var f = mine[i];
                    if (f.Name != Pascal(cname))
                        problems.Add(pair.Value + " field " + i + " is " + f.Name + ", the header's is " + cname);
                    int got = (int)Marshal.OffsetOf(type, f.Name);
                    if (got != offset)
                        problems.Add(pair.Value + "." + f.Name + " at offset " + got + ", " + pair.Key + "." + cname + " at " + offset);
                    var ma = f.GetCustomAttribute<MarshalAsAttribute>();
                    int mySize = f.FieldType == typeof(bool) ? (ma != null && ma.Value == UnmanagedType.I1 ? 1 : 4)
                                                              : Marshal.SizeOf(f.FieldType.IsEnum ? Enum.GetUnderlyingType(f.FieldType) : f.FieldType);
                    if (mySize != size)
                        problems.Add(pair.Value + "." + f.Name + " marshals " + mySize + " bytes, " + ctype + " has " + size);
                    offset += size;
                }
                int total = (offset + align - 1) / align * align;
                if (Marshal.SizeOf(type) != total)
                    problems.Add(pair.Value + " is " + Marshal.SizeOf(type) + " bytes, " + pair.Key + " is " + total);
            }
            Check.True(problems.Count == 0, "the native structs match the header:\n" + string.Join("\n", problems));
        }

        [Test]
        static void ResidencyStats_HasEveryFieldOfTheHeader_AndShowsIt()
        {
            var fields = CFields(SignatureTests.HeaderText(), "tr_residency_stats");
            var props = typeof(ResidencyStats).GetProperties().Select(p => p.Name).ToList();
            var missing = fields.Where(f => !props.Contains(Pascal(f.Item2))).Select(f => f.Item2).ToList();
            Check.True(missing.Count == 0, "ResidencyStats has a property per field; missing: " + string.Join(", ", missing));
            var text = new ResidencyStats().ToString();
            var unshown = fields.Where(f => !text.Contains(f.Item2 + " 0")).Select(f => f.Item2).ToList();
            Check.True(unshown.Count == 0, "ToString shows every field; missing: " + string.Join(", ", unshown));
        }

        [Test]
        static void EventCallback_MatchesTrEventFn()
        {
            var m = Regex.Match(SignatureTests.HeaderText(), @"typedef void \(\*tr_event_fn\)\(([^)]*)\);");
            Check.True(m.Success, "tr_event_fn is declared in the header");
            var cParams = m.Groups[1].Value.Split(',').Select(p => Regex.Replace(p.Trim(), @"\s*\b\w+$", "")).ToArray();
            Check.Equal("const struct tr_event *|void *", string.Join("|", cParams), "tr_event_fn's parameter types");

            var fn = Internal("TensorRef.NativeEventFn");
            var invoke = fn.GetMethod("Invoke");
            Check.Equal(typeof(void), invoke.ReturnType, "the delegate returns void");
            Check.Equal("NativeEvent&|IntPtr", string.Join("|", invoke.GetParameters().Select(p => p.ParameterType.Name)),
                        "the delegate takes the event by reference and the user pointer");
            var conv = fn.GetCustomAttribute<UnmanagedFunctionPointerAttribute>();
            Check.True(conv != null && conv.CallingConvention == CallingConvention.Cdecl, "the delegate is declared Cdecl");
            Check.True(Internal("TensorRef.NativeEvent").IsLayoutSequential, "tr_event's mirror has sequential layout");
        }
    }
}
