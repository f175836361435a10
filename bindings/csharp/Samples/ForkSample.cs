// Mirrors LLamaSharp's BatchedExecutorFork: one prompt, generate a few
// tokens, then fork every branch in two (each with its own seeded sampler)
// and go on, so a tree of continuations shares one prompt in the KV cache.
// Checked: every branch's history extends its parent's; the prefix is
// shared, not copied; a twin with the same seed draws the same tokens; and a
// leaf's logits equal those of a fresh conversation fed its whole history.
using System;
using System.Collections.Generic;
using Weft;

namespace Weft.Samples
{
    internal static class ForkSample
    {
        private sealed class Branch
        {
            public Conversation Conversation;
            public int[] ParentTokens = new int[0];
            public string Name;
            public Branch Twin;  // forked with the same seed as this one
        }

        public static void Run(string modelPath)
        {
            const int splitEvery = 6, depth = 3;
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 32, Threads = 2 }))
            {
                var root = ex.CreateConversation();
                root.Prompt("Not many people know that", addBos: true);
                root.SetSampler(new SamplerParams { Temperature = 0.9f, Seed = 1 });
                var leaves = new List<Branch> { new Branch { Conversation = root, Name = "r" } };
                uint seed = 100;
                int twinChecks = 0;
                for (int level = 0; level <= depth; ++level)
                {
                    for (int t = 0; t < splitEvery; ++t)
                    {
                        while (!ex.Step().Idle) { }
                        foreach (var b in leaves) b.Conversation.Prompt(new[] { b.Conversation.Sample() });
                    }
                    while (!ex.Step().Idle) { }
                    if (level == depth) break;
                    var next = new List<Branch>();
                    foreach (var b in leaves)
                    {
                        var tokens = b.Conversation.Tokens;
                        for (int k = 0; k < 2; ++k)
                        {
                            var f = b.Conversation.Fork();
                            f.SetSampler(new SamplerParams { Temperature = 0.9f, Seed = ++seed });
                            next.Add(new Branch { Conversation = f, ParentTokens = tokens, Name = b.Name + k });
                        }
                    }
                    if (level == 0)
                    {
                        // A twin of the first branch: same parent, same seed.
                        var first = next[0];
                        var twin = leaves[0].Conversation.Fork();
                        twin.SetSampler(new SamplerParams { Temperature = 0.9f, Seed = seed - 1 });
                        first.Twin = new Branch { Conversation = twin, ParentTokens = first.ParentTokens, Name = first.Name + "'" };
                        next.Add(first.Twin);
                    }
                    foreach (var b in leaves)
                    {
                        if (b.Twin != null)
                        {
                            Check.SameTokens(b.Conversation.Tokens, b.Twin.Conversation.Tokens, "twin of " + b.Name + " (same seed)");
                            ++twinChecks;
                        }
                        if (b.Conversation != root) b.Conversation.Dispose();
                    }
                    leaves = next;
                }

                long historyTotal = 0;
                foreach (var b in leaves)
                {
                    var tokens = b.Conversation.Tokens;
                    historyTotal += tokens.Length;
                    Check.StartsWith(b.ParentTokens, tokens, "branch " + b.Name);
                    var text = model.Detokenize(tokens, removeSpecial: true);
                    Console.WriteLine("  " + b.Name.PadRight(5) + " " + Shorten(text));
                }
                Check.Equal(1, twinChecks, "twin compared");
                var stats = ex.Stats;
                Console.WriteLine("  " + leaves.Count + " leaves, " + historyTotal + " tokens of history in " + stats.CellsUsed + " KV cells");
                Check.True(stats.CellsUsed < historyTotal / 2, "forks share their prefix in the KV cache");

                // Fork equivalence: a leaf equals a fresh conversation fed its
                // history, in an executor without prefix reuse (so it decodes
                // all of it rather than sharing the leaf's cells).
                var leaf = leaves[leaves.Count - 2].Conversation;
                using (var alone = new Executor(model, new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 2, Threads = 2, PrefixCacheCells = 0 }))
                using (var fresh = alone.CreateConversation())
                {
                    fresh.Prompt(leaf.Tokens);
                    while (!alone.Step().Idle) { }
                    Check.SameLogits(leaf.GetLogits(), fresh.GetLogits(), "leaf vs fresh conversation");
                }
                foreach (var b in leaves) b.Conversation.Dispose();
                root.Dispose();
                Check.Equal(0, ex.Stats.CellsUsed, "every cell free after disposing the tree");
            }
        }

        private static string Shorten(string s)
        {
            s = s.Replace("\n", " ");
            return s.Length <= 90 ? s : s.Substring(0, 87) + "...";
        }
    }
}
