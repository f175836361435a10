// Assertions for the samples: they run as a test (CTest `csharp_mono`), so
// every result they show is also checked, and any mismatch fails the run.
using System;
using Weft;

namespace Weft.Samples
{
    internal static class Check
    {
        public static int Failures;

        // "Same logits": tests/reference.cpp measures llama.cpp's own batch
        // noise on the tiny model (max normalised MSE 2e-8); weft's tests
        // allow 8x that floor, and so do these.
        public const double LogitsTolerance = 8 * 2e-8;

        public static void True(bool condition, string what)
        {
            if (condition) return;
            ++Failures;
            Console.Error.WriteLine("  FAILED: " + what);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            True(Equals(expected, actual), what + ": expected " + expected + ", got " + actual);
        }

        public static void SameTokens(int[] expected, int[] actual, string what)
        {
            True(expected.Length == actual.Length && Array.TrueForAll(Range(expected.Length), i => expected[i] == actual[i]),
                 what + ": [" + string.Join(",", expected) + "] vs [" + string.Join(",", actual) + "]");
        }

        public static void StartsWith(int[] prefix, int[] tokens, string what)
        {
            bool ok = tokens.Length >= prefix.Length;
            for (int i = 0; ok && i < prefix.Length; ++i) ok = tokens[i] == prefix[i];
            True(ok, what + ": history does not start with its parent's");
        }

        public static void SameLogits(float[] a, float[] b, string what)
        {
            var err = Nmse(a, b);
            True(a.Length == b.Length && err < LogitsTolerance, what + ": nmse " + err + " >= " + LogitsTolerance);
        }

        // The call throws WeftException with `code`, its message naming `needle`.
        public static void Throws(Status code, string needle, Action action, string what)
        {
            try
            {
                action();
                True(false, what + ": did not throw");
            }
            catch (WeftException e)
            {
                True(e.Code == code, what + ": code " + e.Code + " (" + e.Message + "), expected " + code);
                True(e.Message.Contains(needle), what + ": message '" + e.Message + "' lacks '" + needle + "'");
            }
        }

        public static void Throws<TException>(Action action, string what) where TException : Exception
        {
            try
            {
                action();
                True(false, what + ": did not throw");
            }
            catch (TException) { }
            catch (Exception e)
            {
                True(false, what + ": threw " + e.GetType().Name + ": " + e.Message);
            }
        }

        public static double Nmse(float[] a, float[] b)
        {
            double num = 0, den = 0;
            for (int i = 0; i < a.Length && i < b.Length; ++i)
            {
                double d = (double)a[i] - b[i];
                num += d * d;
                den += (double)b[i] * b[i];
            }
            return den > 0 ? num / den : num;
        }

        public static int ArgMax(float[] v, out double margin)
        {
            int best = 0, second = 1;
            if (v[1] > v[0]) { best = 1; second = 0; }
            for (int i = 2; i < v.Length; ++i)
            {
                if (v[i] > v[best]) { second = best; best = i; }
                else if (v[i] > v[second]) second = i;
            }
            margin = (double)v[best] - v[second];
            return best;
        }

        // Greedy choices are compared only where the top two logits are
        // further apart than 10 standard deviations of that noise.
        public static bool ClearWinner(float[] logits)
        {
            double margin, sq = 0;
            ArgMax(logits, out margin);
            foreach (var x in logits) sq += (double)x * x;
            return margin > 10 * Math.Sqrt(2e-8) * Math.Sqrt(sq / logits.Length);
        }

        private static int[] Range(int n)
        {
            var r = new int[n];
            for (int i = 0; i < n; ++i) r[i] = i;
            return r;
        }
    }
}
