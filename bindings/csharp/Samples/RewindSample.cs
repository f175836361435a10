// Mirrors LLamaSharp's BatchedExecutorRewind: generate some tokens, rewind
// a few, generate again, several rounds. With the greedy sampler the
// regenerated tokens repeat the rewound ones: checked token by token (where
// the top two logits are clearly apart) and logit by logit.
using System;
using System.Collections.Generic;
using Weft;

namespace Weft.Samples
{
    internal static class RewindSample
    {
        public static void Run(string modelPath)
        {
            const int generate = 12, rewind = 5, rounds = 4;
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 512, BatchSize = 64, MaxSequences = 2, Threads = 2 }))
            using (var c = ex.CreateConversation())
            {
                c.Prompt("The old lighthouse keeper", addBos: true);
                // What was generated at each position after the prompt.
                var tokens = new List<int>();
                var logits = new List<float[]>();
                int pos = 0;  // generated tokens now in the conversation
                for (int round = 0; round < rounds; ++round)
                {
                    for (int k = 0; k < generate; ++k, ++pos)
                    {
                        while (!ex.Step().Idle) { }
                        var l = c.GetLogits();
                        var t = c.Sample();
                        if (pos < tokens.Count)
                        {
                            // A position seen before the rewind: same logits, same choice.
                            Check.SameLogits(logits[pos], l, "round " + round + ", position " + pos);
                            if (Check.ClearWinner(l)) Check.Equal(tokens[pos], t, "regenerated token at " + pos);
                            tokens[pos] = t;
                            logits[pos] = l;
                        }
                        else
                        {
                            tokens.Add(t);
                            logits.Add(l);
                        }
                        c.Prompt(new[] { t });
                    }
                    while (!ex.Step().Idle) { }
                    var text = model.Detokenize(tokens.GetRange(0, pos).ToArray());
                    Console.WriteLine("  round " + round + ": " + (text.Length > 80 ? text.Substring(0, 80) + "..." : text).Replace("\n", " "));
                    var before = c.TokenCount;
                    c.Rewind(rewind);
                    pos -= rewind;
                    Check.Equal(before - rewind, c.TokenCount, "tokens after rewinding " + rewind);
                }
                Check.Throws(Status.OutOfRange, "cannot rewind", () => c.Rewind(c.TokenCount + 1), "rewind past the start");
            }
        }
    }
}
