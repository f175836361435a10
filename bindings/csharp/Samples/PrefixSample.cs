// Prefix reuse: NPCs created one by one (never forked) that begin with the
// same lore share its KV cells; the lore is decoded once. Checked against an
// executor with reuse off: same logits, more tokens decoded there. Then a
// pinned lore and a tokens-only save.
using System;
using System.Collections.Generic;
using Weft;

namespace Weft.Samples
{
    internal static class PrefixSample
    {
        public static void Run(string modelPath)
        {
            using (var model = Model.Load(modelPath))
            using (var on = new Executor(model, new ExecutorParams { ContextSize = 2048, BatchSize = 128, MaxSequences = 4, Threads = 2 }))
            using (var off = new Executor(model, new ExecutorParams { ContextSize = 2048, BatchSize = 128, MaxSequences = 4, Threads = 2, PrefixCacheCells = 0 }))
            {
                var lore = model.Tokenize("The town of Eldermoor lies between the river and the old forest. Its people trade "
                                          + "grain, wool and iron, and they tell stories of the wolves beyond the hills.", addBos: true);
                Check.True(lore.Length >= 32, "the lore is at least two blocks");
                var names = new[] { " Brenna:", " Mara:", " Tobin:" };
                var keep = new List<Conversation>();
                foreach (var name in names)
                {
                    var own = model.Tokenize(name);
                    var all = new int[lore.Length + own.Length];
                    lore.CopyTo(all, 0);
                    own.CopyTo(all, lore.Length);
                    var a = on.CreateConversation();
                    var b = off.CreateConversation();
                    a.Prompt(all);
                    b.Prompt(all);
                    while (!on.Step().Idle) { }
                    while (!off.Step().Idle) { }
                    Check.SameLogits(b.GetLogits(), a.GetLogits(), "logits of" + name);
                    keep.Add(a);
                    keep.Add(b);
                }
                var s = on.Stats;
                Console.WriteLine("  with reuse: " + s.TokensDecoded + " tokens decoded, " + s.PrefixTokensReused
                                  + " shared; without: " + off.Stats.TokensDecoded);
                Check.True(s.PrefixTokensReused >= 2 * lore.Length, "the lore shared twice");
                Check.Equal(off.Stats.TokensDecoded, s.TokensDecoded + s.PrefixTokensReused, "shared, not decoded");

                // A pinned lore outlives every conversation that used it.
                on.PinPrefix(lore);
                Check.Throws(Status.InvalidArgument, "pinned already", () => on.PinPrefix(lore), "pinned twice");
                while (!on.Step().Idle) { }
                Check.Equal(1, on.Stats.PinnedPrefixes, "one pin");

                // Tokens only: a small file, decoded again on load (sharing the lore).
                var full = keep[0].Save();
                var small = keep[0].SaveTokens();
                Console.WriteLine("  save: " + full.Length + " bytes; tokens only: " + small.Length + " bytes");
                Check.True(small.Length * 4 < full.Length, "tokens-only is smaller");
                var before = on.Stats.TokensDecoded;
                using (var back = on.Load(small))
                {
                    while (!on.Step().Idle) { }
                    Check.True(on.Stats.TokensDecoded - before <= names[0].Length + 2, "only its own tokens decoded");
                    Check.SameLogits(keep[0].GetLogits(), back.GetLogits(), "tokens-only round trip");
                }
                Check.True(on.UnpinPrefix(lore), "unpinned");
                foreach (var c in keep) c.Dispose();
            }
        }
    }
}
