// Weft.Lifetime.cs — the log callback, one-call Shutdown, and defaults for
// a game. Part of the binding; the rules are in Weft.cs.
//
// A host may unload this code while native weft lives on: Unity reloads the
// C# domain but never unloads libweft. So nothing native may keep a managed
// callback past that, and Shutdown is one call that makes sure: it disposes
// every live Executor (stopping its worker and freeing its callbacks),
// Projector, Adapter and Model, cancels loads in flight and clears the log
// callback. The Unity
// glue (Runtime/WeftUnity.cs in the package) calls it before a domain
// reload, on leaving Play Mode and on quit; AppDomain.DomainUnload calls it
// everywhere else.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;

namespace Weft
{
    public static partial class Library
    {
        private static readonly object logGate = new object();
        private static IntPtr logHandle;  // the GCHandle of the installed sink; ours to free

        // Routes weft's and llama.cpp's log lines at `minLevel` or above to
        // `sink` (null silences weft, the default). The sink is called from
        // whichever thread logs, possibly concurrently. When this returns,
        // no thread is inside the previous sink and none will call it again
        // (weft_set_log_callback waits for them), so its handle is freed here
        // and weft holds no pointer to anything of a previous domain's.
        public static void SetLogCallback(Action<LogLevel, string> sink, LogLevel minLevel = LogLevel.Warn)
        {
            if (sink != null) Live.Hook();  // a domain that only logs is cleaned up on unload too
            lock (logGate)
            {
                var ud = sink == null ? IntPtr.Zero : Trampolines.Pin(sink);
                // No free function: weft never calls into this domain to
                // release it, so a new domain's first call cannot reach a
                // freed trampoline of the old one.
                var status = sink == null
                    ? Native.weft_set_log_callback(IntPtr.Zero, (int)LogLevel.None, IntPtr.Zero, IntPtr.Zero)
                    : Native.weft_set_log_callback(Trampolines.Log, (int)minLevel, ud, IntPtr.Zero);
                if (status != Status.Ok)
                {
                    if (ud != IntPtr.Zero) Trampolines.Unpin(ud);  // the old sink stays installed
                    Native.Check(status);
                }
                if (logHandle != IntPtr.Zero) Trampolines.Unpin(logHandle);
                logHandle = ud;
            }
        }

        // Disposes every live Executor (its worker stopped and joined, its
        // callbacks released), Projector, Adapter and Model of this domain, cancels and joins
        // Model.LoadAsync threads, and clears the log callback. Safe to call
        // twice and from any thread but a weft callback; the objects
        // disposed here throw ObjectDisposedException afterwards, and new
        // ones may be made (the next Play Mode).
        public static void Shutdown()
        {
            Live.ShutdownAll();
            SetLogCallback(null);
        }

        // Live counts, for checks after Shutdown (all zero then).
        public static int LiveExecutors { get { return Live.Count(Live.Executors); } }
        public static int LiveModels { get { return Live.Count(Live.Models); } }
        public static int LiveProjectors { get { return Live.Count(Live.Projectors); } }
        public static int LiveAdapters { get { return Live.Count(Live.Adapters); } }
        public static int PendingLoads { get { lock (Live.Gate) return Live.Loads.Count; } }
    }

    // What Shutdown disposes: weak references, so tracking keeps nothing alive.
    internal static class Live
    {
        internal static readonly object Gate = new object();
        internal static readonly List<WeakReference> Executors = new List<WeakReference>();
        internal static readonly List<WeakReference> Models = new List<WeakReference>();
        internal static readonly List<WeakReference> Projectors = new List<WeakReference>();
        internal static readonly List<WeakReference> Adapters = new List<WeakReference>();
        internal static readonly List<PendingLoad> Loads = new List<PendingLoad>();

        static Live()
        {
            // A plain .NET/Mono host that unloads an AppDomain (and Unity,
            // whose editor raises it too) gets the same cleanup.
            AppDomain.CurrentDomain.DomainUnload += delegate { Library.Shutdown(); };
        }

        // Runs the static constructor (and so registers DomainUnload).
        internal static void Hook() { }

        internal static void Add(List<WeakReference> list, IDisposable item)
        {
            lock (Gate)
            {
                list.RemoveAll(w => !w.IsAlive || IsClosed(w.Target));
                list.Add(new WeakReference(item));
            }
        }

        internal static int Count(List<WeakReference> list)
        {
            lock (Gate)
            {
                list.RemoveAll(w => !w.IsAlive || IsClosed(w.Target));
                return list.Count;
            }
        }

        private static bool IsClosed(object o)
        {
            var h = HandleOf(o);
            return h == null || h.IsClosed;
        }

        private static SafeHandle HandleOf(object o)
        {
            var e = o as Executor;
            if (e != null) return e.Handle;
            var p = o as Projector;
            if (p != null) return p.Handle;
            var a = o as Adapter;
            if (a != null) return a.Handle;
            var m = o as Model;
            return m == null ? null : m.Handle;
        }

        internal static void ShutdownAll()
        {
            PendingLoad[] loads;
            lock (Gate) loads = Loads.ToArray();
            foreach (var l in loads) l.Abort();  // their models are disposed as they finish
            foreach (var l in loads) l.Join();
            // Executors first: each joins its worker and frees its callbacks.
            // Then what was loaded for a model, then the models.
            foreach (var d in Take(Executors)) d.Dispose();
            foreach (var d in Take(Projectors)) d.Dispose();
            foreach (var d in Take(Adapters)) d.Dispose();
            foreach (var d in Take(Models)) d.Dispose();
        }

        private static List<IDisposable> Take(List<WeakReference> list)
        {
            var alive = new List<IDisposable>();
            lock (Gate)
            {
                foreach (var w in list)
                {
                    var d = w.Target as IDisposable;
                    if (d != null) alive.Add(d);
                }
                list.Clear();
            }
            return alive;
        }
    }

    // Settings sized for a game that keeps cores for itself.
    public static class GameDefaults
    {
        private static readonly object Gate = new object();

        // Decode threads for weft: physical cores minus those the game keeps
        // (its main and render threads, its job workers), at least 1.
        // Physical cores are estimated as logical / 2 from 4 logical up
        // (SMT on desktop CPUs); pass the real count when you know it.
        public static int Threads(int keepForGame = 2) { return Threads(keepForGame, 0); }

        public static int Threads(int keepForGame, int physicalCores)
        {
            int logical = Environment.ProcessorCount;
            int physical = physicalCores > 0 ? physicalCores : (logical >= 4 ? logical / 2 : logical);
            return Math.Max(1, physical - Math.Max(0, keepForGame));
        }

        // OpenMP's threads spin between parallel regions by default, taking
        // cores from the game; "passive" makes them sleep. libgomp reads
        // OMP_WAIT_POLICY once, when libweft (and so libgomp) is loaded, so
        // this must run before the first call into weft: the Unity glue calls
        // it from its load hooks; elsewhere call it first thing yourself.
        // Sets "passive" unless the environment already says something;
        // true when it did. Too late once libweft is loaded (no effect then).
        public static bool PreferPassiveOpenMp()
        {
            lock (Gate)
            {
                try
                {
                    if (string.IsNullOrEmpty(Environment.GetEnvironmentVariable("OMP_WAIT_POLICY")))
                    {
                        Environment.SetEnvironmentVariable("OMP_WAIT_POLICY", "passive");
                        PassiveOpenMpSet = true;
                    }
                }
                catch (Exception) { /* a sandbox that forbids it: spinning threads, nothing worse */ }
                return PassiveOpenMpSet;
            }
        }

        // True when PreferPassiveOpenMp set the variable in this process.
        public static bool PassiveOpenMpSet { get; private set; }
    }
}
