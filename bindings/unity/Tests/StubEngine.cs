// StubEngine.cs — what Unity does around a MonoBehaviour, reduced to what
// the tests need: [RuntimeInitializeOnLoadMethod]/[InitializeOnLoadMethod]
// hooks run once, a main-thread SynchronizationContext pumped each frame
// (as UnitySynchronizationContext is), Start then Update at a fixed rate
// with each Update timed and its allocations counted. Tests only.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Threading;
using UnityEngine;

namespace Weft.UnityTests
{
    // Posts queued by other threads, run on the main thread by Pump.
    internal sealed class MainThreadContext : SynchronizationContext
    {
        private readonly Queue<KeyValuePair<SendOrPostCallback, object>> queue =
            new Queue<KeyValuePair<SendOrPostCallback, object>>();
        public readonly int MainThreadId = Thread.CurrentThread.ManagedThreadId;
        public int Ran, RanOffMain;

        public override void Post(SendOrPostCallback d, object state)
        {
            lock (queue) queue.Enqueue(new KeyValuePair<SendOrPostCallback, object>(d, state));
        }

        public override void Send(SendOrPostCallback d, object state) { throw new NotSupportedException(); }

        public int Pending { get { lock (queue) return queue.Count; } }

        public void Pump()
        {
            while (true)
            {
                KeyValuePair<SendOrPostCallback, object> item;
                lock (queue)
                {
                    if (queue.Count == 0) return;
                    item = queue.Dequeue();
                }
                ++Ran;
                if (Thread.CurrentThread.ManagedThreadId != MainThreadId) ++RanOffMain;
                item.Key(item.Value);
            }
        }
    }

    internal static class StubEngine
    {
        private static bool hooksInstalled;

        // Unity calls these once per domain; so do we.
        public static void InstallHooks()
        {
            if (hooksInstalled) return;
            hooksInstalled = true;
            foreach (var t in typeof(Weft.Library).Assembly.GetTypes())
                foreach (var m in t.GetMethods(BindingFlags.Static | BindingFlags.Public | BindingFlags.NonPublic))
                    if (m.IsDefined(typeof(RuntimeInitializeOnLoadMethodAttribute), false) ||
                        m.IsDefined(typeof(UnityEditor.InitializeOnLoadMethodAttribute), false))
                        m.Invoke(null, null);
        }

        public static void Call(MonoBehaviour b, string method)
        {
            var a = Bind(b, method);
            if (a != null) a();
        }

        // A delegate to b's message method (reflection's Invoke allocates;
        // a bound delegate does not, so Update's own allocations are measured).
        public static Action Bind(MonoBehaviour b, string method)
        {
            var m = b.GetType().GetMethod(method, BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic);
            return m == null ? null : (Action)Delegate.CreateDelegate(typeof(Action), b, m);
        }

        // Threads of this process now (Linux: /proc/self/task), by name.
        public static Dictionary<string, int> Threads()
        {
            var byName = new Dictionary<string, int>();
            foreach (var dir in Directory.GetDirectories("/proc/self/task"))
            {
                string name;
                try { name = File.ReadAllText(Path.Combine(dir, "comm")).Trim(); }
                catch (IOException) { continue; }  // gone meanwhile
                int n;
                byName.TryGetValue(name, out n);
                byName[name] = n + 1;
            }
            return byName;
        }

        public static string Describe(Dictionary<string, int> threads)
        {
            var parts = new List<string>();
            foreach (var kv in threads) parts.Add(kv.Key + "=" + kv.Value);
            parts.Sort(StringComparer.Ordinal);
            return string.Join(" ", parts.ToArray());
        }
    }

    // Start, then Update at `hz` for up to `frames` frames or until `until`
    // says stop; records each Update's wall time, this thread's CPU time in
    // it, whether it blocked (a voluntary context switch: a lock or a wait,
    // where preemption by other busy threads is involuntary), and the bytes
    // it allocated.
    internal sealed class FrameLoop
    {
        public readonly List<double> UpdateMs = new List<double>();
        public readonly List<double> UpdateCpuMs = new List<double>();
        public readonly List<bool> UpdateBlocked = new List<bool>();
        public readonly List<long> UpdateBytes = new List<long>();
        public int Frame;

        [StructLayout(LayoutKind.Sequential)]
        private struct Timespec { public long Sec, Nsec; }

        [DllImport("libc")] private static extern int clock_gettime(int clock, out Timespec t);
        [DllImport("libc")] private static extern long syscall(long number);

        private static double ThreadCpuMs()
        {
            Timespec t;
            clock_gettime(3, out t);  // CLOCK_THREAD_CPUTIME_ID
            return t.Sec * 1e3 + t.Nsec / 1e6;
        }

        private static long VoluntarySwitches(string statusPath)
        {
            foreach (var line in File.ReadAllLines(statusPath))
                if (line.StartsWith("voluntary_ctxt_switches:")) return long.Parse(line.Substring(24).Trim());
            return -1;
        }

        public void Run(MonoBehaviour b, MainThreadContext ctx, double hz, int frames, Func<int, bool> beforeFrame)
        {
            var period = TimeSpan.FromSeconds(1.0 / hz);
            var clock = Stopwatch.StartNew();
            var timer = new Stopwatch();
            var update = StubEngine.Bind(b, "Update");
            var status = "/proc/self/task/" + syscall(186) + "/status";  // SYS_gettid on x86-64
            for (Frame = 0; Frame < frames; ++Frame)
            {
                if (beforeFrame != null && !beforeFrame(Frame)) break;
                ctx.Pump();            // posted completions first, as Unity's player loop
                b.StepCoroutines();
                long switches = VoluntarySwitches(status);
                double cpu = ThreadCpuMs();
                long bytes = GC.GetAllocatedBytesForCurrentThread();
                timer.Restart();
                update();
                timer.Stop();
                long allocated = GC.GetAllocatedBytesForCurrentThread() - bytes;
                double cpuAfter = ThreadCpuMs();
                UpdateBlocked.Add(VoluntarySwitches(status) != switches);
                UpdateBytes.Add(allocated);
                UpdateCpuMs.Add(cpuAfter - cpu);
                UpdateMs.Add(timer.Elapsed.TotalMilliseconds);
                var next = TimeSpan.FromTicks(period.Ticks * (Frame + 1)) - clock.Elapsed;
                if (next > TimeSpan.Zero) Thread.Sleep(next);
            }
        }

        public static double Percentile(List<double> values, double p)
        {
            if (values.Count == 0) return 0;
            var sorted = new List<double>(values);
            sorted.Sort();
            return sorted[Math.Min(sorted.Count - 1, (int)Math.Ceiling(p * sorted.Count) - 1)];
        }
    }
}
