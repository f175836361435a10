// OmpTests.cs — does setting OMP_WAIT_POLICY=passive before libweft loads
// (what the package's load hooks do under Unity) stop OpenMP's threads from burning
// CPU between a game's steps? Measured: three child processes step one NPC at
// frame cadence (one step, then the rest of a 16.7 ms frame asleep): one
// left to the package's hook (passive), one with OMP_WAIT_POLICY=active, one
// with neither (libgomp's default: spin a while, then sleep); their
// process CPU time per second of wall time is compared.
using System;
using System.Diagnostics;
using System.Globalization;
using System.Threading;
using Weft.Samples;

namespace Weft.UnityTests
{
    internal static class OmpTests
    {
        public static void Passive(string model)
        {
            var exe = typeof(OmpTests).Assembly.Location;
            double passive = Child(exe, model, null), active = Child(exe, model, "active");
            double libgomp = Child(exe, model, "");  // no hooks, no variable: libgomp's own default
            Console.WriteLine("  CPU seconds per wall second at 60 Hz, 2 decode threads: with the package's hook (passive) " +
                              passive.ToString("F3") + ", libgomp's default " + libgomp.ToString("F3") +
                              ", OMP_WAIT_POLICY=active " + active.ToString("F3"));
            Check.True(passive >= 0 && active >= 0 && libgomp >= 0, "all children reported");
            Check.True(passive < active * 0.5, "passive uses under half the CPU of active between steps");
            Check.True(passive < libgomp * 0.5, "passive uses under half the CPU of libgomp's default between steps");
        }

        private static double Child(string exe, string model, string policy)
        {
            var psi = new ProcessStartInfo("mono", "--debug \"" + exe + "\" \"" + model + "\" omp_probe")
            {
                UseShellExecute = false, RedirectStandardOutput = true,
            };
            psi.EnvironmentVariables.Remove("OMP_WAIT_POLICY");
            if (policy == "") psi.EnvironmentVariables["WEFT_TEST_NO_HOOKS"] = "1";
            else if (policy != null) psi.EnvironmentVariables["OMP_WAIT_POLICY"] = policy;
            using (var p = Process.Start(psi))
            {
                string output = p.StandardOutput.ReadToEnd();
                p.WaitForExit();
                Console.Write(output);
                foreach (var line in output.Split('\n'))
                    if (line.StartsWith("cpu_per_wall="))
                        return double.Parse(line.Substring(13), CultureInfo.InvariantCulture);
            }
            return -1;
        }

        // The child: 2 s of frames, one Step each, on 2 decode threads.
        public static void Probe(string model)
        {
            // As Unity runs them, before any script calls weft (unless measuring without).
            if (Environment.GetEnvironmentVariable("WEFT_TEST_NO_HOOKS") != "1") StubEngine.InstallHooks();
            using (var m = Model.Load(model))
            using (var ex = new Executor(m, new ExecutorParams { Threads = 2 }))
            {
                Console.WriteLine("  OMP_WAIT_POLICY=" + Environment.GetEnvironmentVariable("OMP_WAIT_POLICY") +
                                  (GameDefaults.PassiveOpenMpSet ? " (set by the binding)" : " (from the environment)"));
                var npc = ex.CreateConversation();
                npc.Prompt("The blacksmith says", addBos: true);
                npc.Generate(new GenerateParams { MaxTokens = 100000 });
                for (int i = 0; i < 10; ++i) ex.Step(new StepBudget { MaxTokens = 1 });  // warm
                var self = Process.GetCurrentProcess();
                var cpu0 = self.TotalProcessorTime;
                var wall = Stopwatch.StartNew();
                for (int f = 0; f < 120; ++f)
                {
                    ex.Step(new StepBudget { MaxTokens = 1 });
                    var next = TimeSpan.FromTicks(TimeSpan.FromSeconds(1.0 / 60).Ticks * (f + 1)) - wall.Elapsed;
                    if (next > TimeSpan.Zero) Thread.Sleep(next);
                }
                self.Refresh();
                var cpu = (self.TotalProcessorTime - cpu0).TotalSeconds;
                Console.WriteLine("cpu_per_wall=" + (cpu / wall.Elapsed.TotalSeconds).ToString("F4", CultureInfo.InvariantCulture));
            }
        }
    }
}
