// A game loop: weft's worker thread steps in the background while the "main
// thread" runs frames. Each frame it may spawn an NPC (a fork of the shared
// town prompt), prompt it and start a reply, checkpoint one NPC with
// SaveAsync, then polls events — never a callback into game code, and
// nothing that waits for the worker's step: Fork, Prompt, SetSampler,
// Generate, SaveAsync and PollEvents all return at once (Save and SaveAll
// would wait, so the loop does not call them). Checked: every reply
// finishes, the text assembled from token events equals the generation's
// text, nothing is dropped, the checkpoint loads back as a prefix of its
// NPC's final history, and the worker stops cleanly.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Weft;

namespace Weft.Samples
{
    internal static class GameLoopSample
    {
        private sealed class Npc
        {
            public string Name;
            public Conversation Conversation;
            public Generation Reply;
            public readonly StringBuilder Text = new StringBuilder();
            public int TokenEvents;
            public FinishReason? Finished;
        }

        public static void Run(string modelPath)
        {
            const int npcCount = 8, maxTokens = 16;
            var p = new ExecutorParams { ContextSize = 2048, BatchSize = 64, MaxSequences = 16, Threads = 2, Events = true };
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, p))
            {
                var town = ex.CreateConversation();
                town.Prompt("The town of Eldermoor. The blacksmith, the baker and the guard talk to travellers.", addBos: true);
                ex.Start(new WorkerParams { Budget = new StepBudget { MaxTokens = 32 }, IdleWait = TimeSpan.FromMilliseconds(5) });
                Check.True(ex.IsRunning, "worker running");

                var npcs = new Dictionary<ulong, Npc>();
                var clock = Stopwatch.StartNew();
                double worstPollMs = 0, worstLogicMs = 0;
                int frame = 0, finished = 0;
                Task<byte[]> checkpoint = null;  // one NPC saved mid-conversation, without waiting
                Npc saved = null;
                for (; (finished < npcCount || (checkpoint != null && !checkpoint.IsCompleted)) &&
                       clock.Elapsed < TimeSpan.FromSeconds(120); ++frame)
                {
                    var logic0 = clock.Elapsed;
                    // Game logic: one new NPC every other frame.
                    if (frame % 2 == 0 && npcs.Count < npcCount)
                    {
                        var npc = new Npc { Name = "npc" + npcs.Count, Conversation = town.Fork() };
                        npc.Conversation.Prompt("\n" + npc.Name + ":");
                        npc.Conversation.SetSampler(new SamplerParams { Temperature = 0.8f, Seed = (uint)npcs.Count });
                        npc.Reply = npc.Conversation.Generate(new GenerateParams { MaxTokens = maxTokens });
                        npcs.Add(npc.Conversation.Id, npc);
                        saved = saved ?? npc;
                    }
                    // A checkpoint of the first NPC while the worker is busy.
                    if (frame == 5) checkpoint = saved.Conversation.SaveAsync();
                    worstLogicMs = Math.Max(worstLogicMs, (clock.Elapsed - logic0).TotalMilliseconds);
                    // Read what the worker did since last frame.
                    var t0 = clock.Elapsed;
                    foreach (var e in ex.PollEvents())
                    {
                        Npc npc;
                        if (!npcs.TryGetValue(e.ConversationId, out npc))
                        {
                            Check.True(false, "event for an unknown conversation " + e.ConversationId);
                            continue;
                        }
                        if (e.Kind == EventKind.Token)
                        {
                            Check.True(npc.Finished == null, npc.Name + ": token after finishing");
                            npc.Text.Append(e.Text);
                            ++npc.TokenEvents;
                        }
                        else if (e.Kind == EventKind.Finished)
                        {
                            npc.Finished = e.Reason;
                            ++finished;
                        }
                        else
                        {
                            Check.True(false, npc.Name + ": error event " + e.ErrorCode + ": " + e.ErrorMessage);
                        }
                    }
                    worstPollMs = Math.Max(worstPollMs, (clock.Elapsed - t0).TotalMilliseconds);
                    Thread.Sleep(16);  // render the frame
                }

                Check.Equal(npcCount, finished, "replies finished");
                Check.True(checkpoint != null && checkpoint.Status == TaskStatus.RanToCompletion, "checkpoint saved");
                foreach (var npc in npcs.Values)
                {
                    var reason = npc.Finished ?? FinishReason.Running;
                    Check.True(reason == FinishReason.MaxTokens || reason == FinishReason.EndOfGeneration,
                               npc.Name + ": finished with " + reason);
                    Check.Equal(npc.Reply.TokenCount, npc.TokenEvents, npc.Name + ": one token event per token");
                    Check.Equal(npc.Reply.Text, npc.Text.ToString(), npc.Name + ": text from events");
                    Check.StartsWith(town.Tokens, npc.Conversation.Tokens, npc.Name);
                }
                var stats = ex.Stats;
                Check.Equal(0L, stats.EventsDropped, "events dropped");
                Check.True(stats.WorkerRunning, "stats see the worker");
                Console.WriteLine("  " + npcs.Count + " NPCs replied over " + frame + " frames; " + stats.TokensDecoded +
                                  " tokens decoded in " + stats.Steps + " steps (p50 " + stats.StepMsP50.ToString("F2") +
                                  " ms); slowest event poll " + worstPollMs.ToString("F2") + " ms, slowest frame logic " +
                                  worstLogicMs.ToString("F2") + " ms");
                ex.Stop();  // shutting down: joins the worker
                Check.True(!ex.IsRunning, "worker stopped");
                if (checkpoint != null && checkpoint.Status == TaskStatus.RanToCompletion)
                {
                    using (var back = ex.Load(checkpoint.Result))
                    {
                        Check.StartsWith(town.Tokens, back.Tokens, saved.Name + " checkpoint");
                        Check.StartsWith(back.Tokens, saved.Conversation.Tokens, saved.Name + " after its checkpoint");
                    }
                    Console.WriteLine("  checkpoint of " + saved.Name + ": " + checkpoint.Result.Length + " bytes");
                }
                foreach (var npc in npcs.Values)
                {
                    npc.Reply.Dispose();
                    npc.Conversation.Dispose();
                }
                town.Dispose();
            }
        }
    }
}
