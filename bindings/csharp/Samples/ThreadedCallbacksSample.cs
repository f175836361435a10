// A C# thread steps in a loop (as eublefar's Unity game does), the "main
// thread" prompts and starts generations with OnToken callbacks, which run
// on the stepping thread and only enqueue. Checked: after Wait, every
// token's callback has run and their text equals the generation's; a
// callback that throws is caught at the native boundary and reported.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using Weft;

namespace Weft.Samples
{
    internal static class ThreadedCallbacksSample
    {
        public static void Run(string modelPath)
        {
            const int count = 4, maxTokens = 12;
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 8, Threads = 2 }))
            {
                var stop = 0;
                Exception stepError = null;
                var stepper = new Thread(() =>
                {
                    try { while (Volatile.Read(ref stop) == 0) if (ex.Step().Idle) Thread.Sleep(1); }
                    catch (Exception e) { stepError = e; }
                });
                stepper.Start();

                var queue = new ConcurrentQueue<Tuple<int, int, string>>();  // (npc, token, text)
                var convs = new List<Conversation>();
                var gens = new List<Generation>();
                for (int i = 0; i < count; ++i)
                {
                    int npc = i;
                    var c = ex.CreateConversation();
                    c.Prompt("Guard " + i + " shouts:", addBos: true);
                    convs.Add(c);
                    gens.Add(c.Generate(new GenerateParams
                    {
                        MaxTokens = maxTokens,
                        OnToken = (token, text) => queue.Enqueue(Tuple.Create(npc, token, text)),
                    }));
                }
                // One more whose callback throws on its third token.
                var thrower = ex.CreateConversation();
                thrower.Prompt("Thief:", addBos: true);
                int seen = 0;
                var bad = thrower.Generate(new GenerateParams
                {
                    MaxTokens = 6,
                    OnToken = (token, text) => { if (++seen == 3) throw new InvalidOperationException("game bug"); },
                });

                foreach (var g in gens) Check.True(g.Wait(TimeSpan.FromSeconds(60)), "generation and its callbacks done");
                Check.True(bad.Wait(TimeSpan.FromSeconds(60)), "throwing generation done");
                Volatile.Write(ref stop, 1);
                stepper.Join();
                Check.True(stepError == null, "stepping thread: " + stepError);

                var texts = new StringBuilder[count];
                var tokens = new List<int>[count];
                for (int i = 0; i < count; ++i) { texts[i] = new StringBuilder(); tokens[i] = new List<int>(); }
                Tuple<int, int, string> item;
                while (queue.TryDequeue(out item))
                {
                    texts[item.Item1].Append(item.Item3);
                    tokens[item.Item1].Add(item.Item2);
                }
                for (int i = 0; i < count; ++i)
                {
                    Check.True(gens[i].IsDone, "guard " + i + " done");
                    Check.SameTokens(gens[i].Tokens, tokens[i].ToArray(), "guard " + i + ": callback tokens");
                    Check.Equal(gens[i].Text, texts[i].ToString(), "guard " + i + ": callback text");
                    Console.WriteLine("  guard " + i + " (" + gens[i].Reason + "): " + gens[i].Text.Replace("\n", " "));
                }
                Check.True(bad.CallbackException is InvalidOperationException, "callback exception reported");
                Check.Equal(6, seen, "the generation went on past the throwing callback");
                foreach (var g in gens) g.Dispose();
                foreach (var c in convs) c.Dispose();
                bad.Dispose();
                thrower.Dispose();
            }
        }
    }
}
