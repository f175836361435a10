// The samples, run one after another on a model file:
//   mono WeftSamples.exe <model.gguf> [sample-name]
// Exit code 0 only when every check passed (CTest `csharp_mono`).
using System;
using System.Diagnostics;

namespace Weft.Samples
{
    internal static class Program
    {
        private static int Main(string[] args)
        {
            if (args.Length < 1)
            {
                Console.Error.WriteLine("usage: mono WeftSamples.exe <model.gguf> [sample-name]");
                return 2;
            }
            Console.WriteLine("weft " + Library.Version + " on llama.cpp " + Library.LlamaVersion + ", CPU code " +
                              Library.CpuVariant);
            // The test presets name the CPU code each build must run (tests/dist).
            var expectVariant = Environment.GetEnvironmentVariable("WEFT_EXPECT_CPU_VARIANT");
            if (!string.IsNullOrEmpty(expectVariant)) Check.Equal(expectVariant, Library.CpuVariant, "CPU code");
            var samples = new Tuple<string, Action<string>>[]
            {
                Tuple.Create<string, Action<string>>("basics", BasicsSample.Run),
                Tuple.Create<string, Action<string>>("fork", ForkSample.Run),
                Tuple.Create<string, Action<string>>("rewind", RewindSample.Run),
                Tuple.Create<string, Action<string>>("prefix", PrefixSample.Run),
                Tuple.Create<string, Action<string>>("save_load", SaveLoadSample.Run),
                Tuple.Create<string, Action<string>>("save_async", SaveAsyncSample.Run),
                Tuple.Create<string, Action<string>>("game_loop", GameLoopSample.Run),
                Tuple.Create<string, Action<string>>("threaded_callbacks", ThreadedCallbacksSample.Run),
                Tuple.Create<string, Action<string>>("adapters", AdapterSample.Run),
                Tuple.Create<string, Action<string>>("adapter_checks", AdapterChecksSample.Run),
                Tuple.Create<string, Action<string>>("images", ImageSample.Run),
                Tuple.Create<string, Action<string>>("actions", ActionsSample.Run),
                Tuple.Create<string, Action<string>>("embeddings", EmbeddingSample.Run),
                Tuple.Create<string, Action<string>>("memory", MemorySample.Run),
                Tuple.Create<string, Action<string>>("speculative", SpeculativeSample.Run),
                Tuple.Create<string, Action<string>>("memory_fit", MemoryFitSample.Run),
            };
            int ran = 0;
            foreach (var s in samples)
            {
                if (args.Length > 1 && !s.Item1.Contains(args[1])) continue;
                var before = Check.Failures;
                var clock = Stopwatch.StartNew();
                Console.WriteLine("== " + s.Item1);
                try
                {
                    s.Item2(args[0]);
                }
                catch (Exception e)
                {
                    Check.True(false, "unexpected " + e);
                }
                Console.WriteLine("[" + (Check.Failures == before ? "  OK  " : "FAILED") + "] " + s.Item1 + " (" +
                                  clock.Elapsed.TotalSeconds.ToString("F2") + " s)");
                ++ran;
            }
            // Finalizers free what a sample forgot; run them before exit so a
            // crash there shows up here, not never.
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Console.WriteLine(ran + " samples, " + Check.Failures + " failed checks");
            return Check.Failures == 0 && ran > 0 ? 0 : 1;
        }
    }
}
