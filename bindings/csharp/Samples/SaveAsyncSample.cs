// Conversation.SaveAsync: a save that never waits for a running step.
// Checked: with no step running the task is complete when SaveAsync returns,
// with the bytes Save() gives; asked for while a step is held inside its
// token callbacks it returns at once and completes by the next step, with
// the same bytes; a conversation disposed before that boundary faults its
// task with Status.Disposed; one disposed before the call (or whose
// executor is gone) throws at once; one native callback per SaveAsync.
using System;
using System.Threading;
using System.Threading.Tasks;
using Weft;

namespace Weft.Samples
{
    internal static class SaveAsyncSample
    {
        public static void Run(string modelPath)
        {
            using (var model = Model.Load(modelPath))
            {
                var ex = new Executor(model, new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 4, Threads = 2 });
                var smith = ex.CreateConversation();
                smith.Prompt("The smith says", addBos: true);
                smith.SetSampler(new SamplerParams { Temperature = 0.7f, Seed = 11 });
                var guard = ex.CreateConversation();
                guard.Prompt("The guard says", addBos: true);
                var talker = ex.CreateConversation();
                talker.Prompt("The innkeeper says", addBos: true);
                while (!ex.Step().Idle) { }
                var state = smith.Save();
                var calls = Trampolines.SavedCalls;

                // No step running: done before SaveAsync returns.
                var now = smith.SaveAsync();
                Check.True(now.IsCompleted, "SaveAsync with no step running is complete at once");
                Check.True(SameBytes(state, now.Result), "SaveAsync's bytes equal Save()'s");
                Check.Equal(calls + 1, Trampolines.SavedCalls, "one callback for one SaveAsync");

                // A step held inside its token callback: SaveAsync and Dispose
                // return at once (they would deadlock here if they waited).
                var held = new ManualResetEventSlim(false);
                var release = new ManualResetEventSlim(false);
                var gen = talker.Generate(new GenerateParams
                {
                    MaxTokens = 4,
                    OnToken = (t, s) => { held.Set(); release.Wait(); },
                });
                var stepper = new Thread(() => ex.Step());
                stepper.Start();
                Check.True(held.Wait(TimeSpan.FromSeconds(60)), "the step reached its callback");
                var later = smith.SaveAsync();
                var doomed = guard.SaveAsync();
                guard.Dispose();
                Check.True(!later.IsCompleted && !doomed.IsCompleted, "nothing saved while the step runs");
                release.Set();
                stepper.Join();
                ex.Step();  // by the end of the next step both have completed
                Check.True(later.Wait(TimeSpan.FromSeconds(60)), "the pending save completed");
                Check.True(later.Status == TaskStatus.RanToCompletion && SameBytes(state, later.Result),
                           "a save taken at a step boundary equals Save()");
                Check.True(Faulted(doomed, Status.Disposed, "disposed"), "disposed before the boundary: the task faults");
                Check.Equal(calls + 3, Trampolines.SavedCalls, "one callback per SaveAsync");
                while (!gen.IsDone) ex.Step();
                gen.Dispose();
                Console.WriteLine("  saved " + state.Length + " bytes at once and at a step boundary, equal");

                // Refused at the call: a conversation whose executor is gone.
                ex.Dispose();
                Check.Throws(Status.Disposed, "executor was destroyed", () => smith.SaveAsync(), "SaveAsync after the executor");
                Check.Throws<ObjectDisposedException>(() => guard.SaveAsync(), "SaveAsync on a disposed Conversation");
                Check.Equal(calls + 3, Trampolines.SavedCalls, "no callback for a refused SaveAsync");
                smith.Dispose();
                talker.Dispose();
            }
        }

        private static bool SameBytes(byte[] a, byte[] b)
        {
            if (a == null || b == null || a.Length != b.Length) return false;
            for (int i = 0; i < a.Length; ++i)
            {
                if (a[i] != b[i]) return false;
            }
            return true;
        }

        private static bool Faulted(Task<byte[]> task, Status code, string needle)
        {
            try
            {
                task.Wait(TimeSpan.FromSeconds(60));
                return false;
            }
            catch (AggregateException e)
            {
                var w = e.InnerException as WeftException;
                return w != null && w.Code == code && w.Message.Contains(needle);
            }
        }
    }
}
