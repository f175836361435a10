// Mirrors LLamaSharp's BatchedExecutorSaveAndLoad: generate, save one
// conversation, dispose it (its KV cells go), load it back and go on; also
// through a file into another executor, and a whole-executor snapshot.
// Checked: the loaded conversation continues exactly as the original would
// have (same seeded draws: logits and sampler state travel), the history
// is intact, and corrupt state is refused without harm.
using System;
using System.IO;
using Weft;

namespace Weft.Samples
{
    internal static class SaveLoadSample
    {
        public static void Run(string modelPath)
        {
            const int before = 8, after = 10;
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 4, Threads = 2 }))
            using (var other = new Executor(model, new ExecutorParams { ContextSize = 2048, BatchSize = 128, MaxSequences = 8, Threads = 2 }))
            {
                var c = ex.CreateConversation();
                c.Prompt("The dragon guarding the bridge said", addBos: true);
                c.SetSampler(new SamplerParams { Temperature = 0.9f, Seed = 2024 });
                Generate(ex, c, before);
                var state = c.Save();
                var history = c.Tokens;
                var path = Path.Combine(Path.GetTempPath(), "weft-sample-" + Guid.NewGuid().ToString("N") + ".state");
                c.Save(path);
                Console.WriteLine("  saved " + history.Length + " tokens in " + state.Length + " bytes");

                // What the original goes on to say...
                var expected = Generate(ex, c, after);
                c.Dispose();
                Check.Equal(0, ex.Stats.CellsUsed, "disposing frees the cells");

                // ...is what the loaded copy says, here and in another executor.
                using (var back = ex.Load(state))
                using (var far = other.Load(path))
                {
                    Check.SameTokens(history, back.Tokens, "history after load");
                    Check.True(back.HasLogits, "logits travel: sampling works at once");
                    Check.SameTokens(expected, Generate(ex, back, after), "continuation after load");
                    Check.SameTokens(expected, Generate(other, far, after), "continuation in another executor");
                    Console.WriteLine("  continued: " + model.Detokenize(expected).Replace("\n", " "));

                    // A whole executor at once.
                    var snapshot = ex.SaveAll();
                    var loaded = other.LoadAll(snapshot);
                    Check.Equal(1, loaded.Count, "conversations in the snapshot");
                    foreach (var kv in loaded)
                    {
                        Check.Equal(back.Id, kv.Key, "saved id");
                        Check.SameTokens(back.Tokens, kv.Value.Tokens, "snapshot history");
                        kv.Value.Dispose();
                    }
                }
                File.Delete(path);

                var corrupt = (byte[])state.Clone();
                for (int i = 0; i < corrupt.Length; i += 97) corrupt[i] ^= 0x5a;
                var count = ex.Stats.Conversations;
                Check.Throws(Status.Corrupt, "", () => ex.Load(corrupt), "corrupt state");
                Check.Throws(Status.NotFound, "", () => ex.Load(path), "missing file");
                Check.Equal(count, ex.Stats.Conversations, "a refused load adds nothing");

                // Parking: a hint that moves it out of the cache; it comes back on use.
                using (var p = ex.Load(state))
                {
                    while (!ex.Step().Idle) { }
                    Check.True(p.Park(), "parked");
                    Check.Equal(Residency.Ram, p.Residency, "residency after Park");
                    p.Prompt(new[] { p.Sample() });
                    while (!ex.Step().Idle) { }
                    Check.Equal(Residency.Resident, p.Residency, "restored on use");
                    Check.True(ex.Stats.Restores >= 1, "a restore counted");
                }
            }
        }

        // `n` tokens with the conversation's own sampler, one step at a time.
        private static int[] Generate(Executor ex, Conversation c, int n)
        {
            var tokens = new int[n];
            for (int i = 0; i < n; ++i)
            {
                while (!ex.Step().Idle) { }
                tokens[i] = c.Sample();
                c.Prompt(new[] { tokens[i] });
            }
            while (!ex.Step().Idle) { }
            return tokens;
        }
    }
}
