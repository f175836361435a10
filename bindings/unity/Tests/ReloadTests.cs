// ReloadTests.cs — a log callback replaced while other threads log, and
// domain reloads: Unity's hook (through the stub) and a real AppDomain
// unloaded under Mono. What "no stale callback" and "no leaked worker"
// mean here is counted, not assumed.
using System;
using System.Collections.Generic;
using System.Threading;
using UnityEditor;
using Weft.Samples;
using Weft.Unity;

namespace Weft.UnityTests
{
    // A log sink that knows when it is retired: a call that starts, or is
    // still running, after SetLogCallback replaced it is a stale call.
    internal sealed class CountingSink
    {
        public int Calls, Active, Stale;
        public volatile bool Retired;
        public static int Total;  // lines to every sink

        public void On(LogLevel level, string line)
        {
            Interlocked.Increment(ref Total);
            Interlocked.Increment(ref Active);
            if (Retired) Interlocked.Increment(ref Stale);
            Interlocked.Increment(ref Calls);
            Thread.SpinWait(2000);  // widen the window a replacement could race
            Interlocked.Decrement(ref Active);
        }
    }

    internal static class ReloadTests
    {
        // Three threads load the model's vocabulary over and over (llama.cpp
        // logs dozens of lines each time) while the main thread replaces or
        // clears the sink, at least 300 times and until 2000 lines went to
        // sinks (20 s at most). After each SetLogCallback returns, the
        // replaced sink must have no call in flight and never get another.
        public static void LogSwap(string model)
        {
            var stop = false;
            var loaders = new List<Thread>();
            for (int t = 0; t < 3; ++t)
            {
                var th = new Thread(() =>
                {
                    while (!Volatile.Read(ref stop))
                        using (Model.Load(model, new ModelParams { VocabOnly = true })) { }
                });
                th.Start();
                loaders.Add(th);
            }
            var retired = new List<WeakReference>();
            CountingSink current = null;
            int inFlightAtReturn = 0, calls = 0, stale = 0;
            var clock = System.Diagnostics.Stopwatch.StartNew();
            int swaps = 0;
            for (int i = 0; i < 300 || (Volatile.Read(ref CountingSink.Total) < 2000 && clock.Elapsed.TotalSeconds < 20); ++i)
            {
                ++swaps;
                var next = i % 10 == 9 ? null : new CountingSink();
                Library.SetLogCallback(next == null ? null : new Action<LogLevel, string>(next.On), LogLevel.Debug);
                if (current != null)
                {
                    current.Retired = true;
                    if (Volatile.Read(ref current.Active) != 0) ++inFlightAtReturn;
                    retired.Add(new WeakReference(current));
                }
                current = next;
                Thread.Sleep(2);
            }
            Library.SetLogCallback(null);
            if (current != null) { current.Retired = true; retired.Add(new WeakReference(current)); }
            Volatile.Write(ref stop, true);
            foreach (var th in loaders) th.Join();
            Thread.Sleep(50);
            foreach (var w in retired)
            {
                var s = (CountingSink)w.Target;
                if (s == null) continue;
                calls += s.Calls;
                stale += s.Stale;
            }
            Console.WriteLine("  log_swap: " + calls + " lines to " + retired.Count + " sinks over " + swaps +
                              " swaps; in flight at return " + inFlightAtReturn + ", stale calls " + stale);
            Check.True(calls >= 2000, "the loaders logged (" + calls + " lines reached sinks)");
            Check.Equal(0, inFlightAtReturn, "sinks still running when SetLogCallback returned");
            Check.Equal(0, stale, "calls into a replaced sink");
            // The binding freed every replaced sink's GCHandle: nothing roots
            // them. (Mono scans stacks conservatively: a stale stack slot may
            // keep one alive; a leaked handle would keep them all.)
            current = null;
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            int alive = 0;
            foreach (var w in retired) if (w.IsAlive) ++alive;
            Check.True(alive <= 1, "replaced sinks still rooted (GCHandles not freed): " + alive + " of " + retired.Count);
        }

        // What a game keeps in statics across Play Mode.
        private static Model heldModel;
        private static Executor heldExecutor;
        private static Conversation heldNpc;
        private static Adapter heldAdapter;
        private static Projector heldProjector;

        private static int WeftThreads()
        {
            // Mono's own threads come and go (thread pool, finalizer); weft's
            // worker, encoder and OpenMP threads are named by the process
            // ("mono" / "weft*"), so count everything not Mono's own.
            int n = 0;
            foreach (var kv in StubEngine.Threads())
                if (!kv.Key.StartsWith("Threadpool") && !kv.Key.StartsWith("Finalizer") && !kv.Key.StartsWith("SGen") &&
                    !kv.Key.StartsWith("weft Model.Load"))
                    n += kv.Value;
            return n;
        }

        private static void StartHeldWork(string model, CountingSink sink)
        {
            Library.SetLogCallback(sink.On, LogLevel.Debug);
            heldModel = Model.Load(model);
            // A LoRA and a projector held in statics too (tests/capi's fixtures
            // make them beside the model): Shutdown must dispose them.
            var dir = System.IO.Path.GetDirectoryName(model);
            heldAdapter = heldModel.LoadAdapter(System.IO.Path.Combine(dir, "tiny-lora.gguf"));
            heldProjector = Projector.Load(heldModel, System.IO.Path.Combine(dir, "tiny-mmproj.gguf"));
            heldExecutor = new Executor(heldModel, new ExecutorParams { Events = true, Threads = GameDefaults.Threads() });
            heldNpc = heldExecutor.CreateConversation();
            heldNpc.Prompt("The blacksmith says", addBos: true);
            heldNpc.Generate(new GenerateParams { MaxTokens = 100000 });
            heldExecutor.Start(new WorkerParams { Budget = new StepBudget { MaxTokens = 8 } });
        }

        // Unity's reload, through the hooks the package installs: statics hold
        // a model, an executor whose worker is generating, and a log sink.
        // beforeAssemblyReload must leave no worker thread, no live object,
        // no sink; then a new sink, a log line and a new load must work. Three
        // cycles, thread counts compared with a warmed-up baseline.
        public static void UnityReload(string model)
        {
            StubEngine.InstallHooks();
            Check.Equal(1, AssemblyReloadEvents.Handlers, "beforeAssemblyReload handlers");
            // Warm up: OpenMP's pool starts with the first decode and stays.
            StartHeldWork(model, new CountingSink());
            Thread.Sleep(200);
            Library.Shutdown();
            Thread.Sleep(100);
            int baseline = WeftThreads();
            for (int cycle = 0; cycle < 3; ++cycle)
            {
                var sink = new CountingSink();
                StartHeldWork(model, sink);
                Thread.Sleep(150);
                int running = WeftThreads();
                Check.True(heldExecutor.IsRunning && running > baseline,
                           "cycle " + cycle + ": the worker runs (" + running + " threads, baseline " + baseline + ")");
                int shutdowns = WeftUnity.Shutdowns;
                AssemblyReloadEvents.RaiseBeforeReload();
                sink.Retired = true;
                Check.Equal(shutdowns + 1, WeftUnity.Shutdowns, "the reload hook ran Shutdown");
                Check.Equal(0, Library.LiveExecutors, "live executors after the reload hook");
                Check.Equal(0, Library.LiveModels, "live models after the reload hook");
                Check.Equal(0, Library.LiveAdapters, "live adapters after the reload hook");
                Check.Equal(0, Library.LiveProjectors, "live projectors after the reload hook");
                Check.Throws<ObjectDisposedException>(() => { var n = heldAdapter.Name; }, "a disposed adapter");
                Check.Throws<ObjectDisposedException>(() => { var r = heldProjector.MRope; }, "a disposed projector");
                Check.Throws<ObjectDisposedException>(() => heldExecutor.Step(), "a disposed executor");
                Thread.Sleep(100);
                int after = WeftThreads();
                Check.True(after <= baseline, "cycle " + cycle + ": threads after the hook " + after + " > baseline " +
                           baseline + " (" + StubEngine.Describe(StubEngine.Threads()) + ")");
                // The "new domain": a new sink, a line logged, a model loaded again.
                var fresh = new CountingSink();
                Library.SetLogCallback(fresh.On, LogLevel.Debug);
                using (var m = Model.Load(model)) Check.True(m.VocabSize > 0, "load after the reload");
                Check.True(fresh.Calls > 0, "the new sink got the load's lines");
                Check.Equal(0, sink.Stale, "lines to the old domain's sink after the hook");
                Library.SetLogCallback(null);
                heldModel = null; heldExecutor = null; heldNpc = null; heldAdapter = null; heldProjector = null;
            }
            // Leaving Play Mode shuts down too, and so does quitting.
            StartHeldWork(model, new CountingSink());
            EditorApplication.Raise(PlayModeStateChange.ExitingPlayMode);
            Check.Equal(0, Library.LiveExecutors, "live executors after ExitingPlayMode");
            StartHeldWork(model, new CountingSink());
            UnityEngine.Application.RaiseQuitting();
            Check.Equal(0, Library.LiveModels, "live models after quitting");
        }

        // A real domain unload: a child AppDomain installs its sink, loads,
        // starts a generating worker and is unloaded without any cleanup of
        // its own; its DomainUnload handler (Library's) must shut weft down,
        // or this domain's next log line would enter the unloaded domain.
        public static void AppDomainUnload(string model)
        {
            StartHeldWork(model, new CountingSink());  // warm OpenMP's pool up first
            Thread.Sleep(200);
            Library.Shutdown();
            Thread.Sleep(100);
            int before = WeftThreads();
            var child = AppDomain.CreateDomain("weft-child");
            child.SetData("model", model);
            child.DoCallBack(ChildWork);
            Check.True((bool)child.GetData("running"), "the child domain's worker ran");
            Check.True((int)child.GetData("lines") > 0, "the child domain's sink got lines");
            AppDomain.Unload(child);
            Thread.Sleep(100);
            var sink = new CountingSink();
            Library.SetLogCallback(sink.On, LogLevel.Debug);
            using (var m = Model.Load(model)) Check.True(m.VocabSize > 0, "load after the unload");
            Check.True(sink.Calls > 0, "this domain's sink got the load's lines");
            Library.SetLogCallback(null);
            int after = WeftThreads();
            Check.True(after <= before, "threads after unloading the child: " + after + " (before " + before + ")");

            // A domain that only installs a sink: its unload must clear it too,
            // or this domain's next log line (no sink of ours installed) would
            // run the unloaded domain's trampoline.
            var logger = AppDomain.CreateDomain("weft-logger");
            logger.DoCallBack(ChildLogOnly);
            AppDomain.Unload(logger);
            using (var m = Model.Load(model)) Check.True(m.VocabSize > 0, "load after the logging domain went");
            var again = new CountingSink();
            Library.SetLogCallback(again.On, LogLevel.Debug);
            using (Model.Load(model)) { }
            Library.SetLogCallback(null);
            Check.True(again.Calls > 0, "a sink installed after the logging domain went gets lines");
        }

        private static void ChildLogOnly() { Library.SetLogCallback(new CountingSink().On, LogLevel.Debug); }

        private static void ChildWork()
        {
            var d = AppDomain.CurrentDomain;
            var sink = new CountingSink();
            StartHeldWork((string)d.GetData("model"), sink);
            Thread.Sleep(200);
            d.SetData("running", heldExecutor.IsRunning);
            d.SetData("lines", sink.Calls);
            // No Shutdown here: the unload must take care of it.
        }
    }
}
