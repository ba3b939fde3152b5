// A strict little JSON reader for the tests (the suite takes no packages, and Mono's JSON
// assemblies are not installed by default): objects become Dictionary<string, object>, arrays
// List<object>, numbers double, plus string, bool and null. Anything malformed, or trailing text,
// throws FormatException with the offset.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace TensorRef.Tests
{
    static class MiniJson
    {
        public static object Parse(string text)
        {
            int i = 0;
            var value = Value(text, ref i);
            Space(text, ref i);
            if (i != text.Length) throw Bad(text, i, "trailing text");
            return value;
        }

        static FormatException Bad(string s, int i, string what) =>
            new FormatException("JSON: " + what + " at offset " + i + " near '" + s.Substring(i, Math.Min(20, s.Length - i)) + "'");

        static void Space(string s, ref int i)
        {
            while (i < s.Length && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
        }

        static void Expect(string s, ref int i, char c)
        {
            Space(s, ref i);
            if (i >= s.Length || s[i] != c) throw Bad(s, i, "expected '" + c + "'");
            i++;
        }

        static object Value(string s, ref int i)
        {
            Space(s, ref i);
            if (i >= s.Length) throw Bad(s, i, "unexpected end");
            char c = s[i];
            if (c == '{')
            {
                var obj = new Dictionary<string, object>();
                i++;
                Space(s, ref i);
                if (i < s.Length && s[i] == '}') { i++; return obj; }
                do
                {
                    Space(s, ref i);
                    if (i >= s.Length || s[i] != '"') throw Bad(s, i, "expected a key");
                    var key = Str(s, ref i);
                    if (obj.ContainsKey(key)) throw Bad(s, i, "duplicate key " + key);
                    Expect(s, ref i, ':');
                    obj[key] = Value(s, ref i);
                    Space(s, ref i);
                } while (i < s.Length && s[i] == ',' && ++i > 0);
                Expect(s, ref i, '}');
                return obj;
            }
            if (c == '[')
            {
                var list = new List<object>();
                i++;
                Space(s, ref i);
                if (i < s.Length && s[i] == ']') { i++; return list; }
                do
                {
                    list.Add(Value(s, ref i));
                    Space(s, ref i);
                } while (i < s.Length && s[i] == ',' && ++i > 0);
                Expect(s, ref i, ']');
                return list;
            }
            if (c == '"') return Str(s, ref i);
            foreach (var lit in new[] { "true", "false", "null" })
                if (string.CompareOrdinal(s, i, lit, 0, lit.Length) == 0)
                {
                    i += lit.Length;
                    return lit == "null" ? null : (object)(lit == "true");
                }
            int start = i;
            while (i < s.Length && "+-0123456789.eE".IndexOf(s[i]) >= 0) i++;
            double d;
            if (i == start || !double.TryParse(s.Substring(start, i - start), NumberStyles.Float, CultureInfo.InvariantCulture, out d))
                throw Bad(s, start, "expected a value");
            return d;
        }

        static string Str(string s, ref int i)
        {
            var sb = new StringBuilder();
            i++; // opening quote
            while (i < s.Length && s[i] != '"')
            {
                if (s[i] < ' ') throw Bad(s, i, "control character in a string");
                if (s[i] == '\\')
                {
                    if (++i >= s.Length) break;
                    char e = s[i];
                    if (e == 'u')
                    {
                        if (i + 4 >= s.Length) throw Bad(s, i, "short \\u escape");
                        sb.Append((char)int.Parse(s.Substring(i + 1, 4), NumberStyles.HexNumber));
                        i += 4;
                    }
                    else
                    {
                        int k = "\"\\/bfnrt".IndexOf(e);
                        if (k < 0) throw Bad(s, i, "bad escape");
                        sb.Append("\"\\/\b\f\n\r\t"[k]);
                    }
                }
                else sb.Append(s[i]);
                i++;
            }
            if (i >= s.Length) throw Bad(s, i, "unterminated string");
            i++;
            return sb.ToString();
        }
    }
}
