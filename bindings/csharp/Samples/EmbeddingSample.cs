// An innkeeper remembers what she heard: each line is embedded by the same
// steps that let two NPCs talk, and the memory nearest a question is found by
// cosine similarity. Checked: every vector equals its text embedded alone
// (within 8x what batching alone does to llama.cpp's pooled output, measured
// here), is unit length, and equals its tokens given to EmbedTokens; the
// steps' and the stats' counts agree; bad input is a WeftException by
// Status; Cancel; an executor disposed before its embeddings are done; the
// worker. With the executor's own model pooled, and with an embedding model
// of its own: $WEFT_TEST_EMBED_MODEL (the CTest fixture's embed.gguf), else
// embed.gguf beside the model (`weft make-model --preset embed --out ...`),
// skipped when absent.
using System;
using System.IO;
using Weft;

namespace Weft.Samples
{
    internal static class EmbeddingSample
    {
        private static readonly string[] Words =
        {
            "the", "blacksmith", "sells", "silver", "swords", "to", "travellers", "at", "dawn", "river", "gate",
            "mayor", "owes", "three", "gold", "coins", "wolf", "forest", "north", "bread", "baker", "market", "key",
            "hidden", "under", "anvil", "song", "tavern", "night", "guard",
        };

        public static void Run(string modelPath)
        {
            using (var model = Model.Load(modelPath))
            {
                Scenario(model, null, "own model");
                Refusals(model);
                Lifetime(model);
                var path = Environment.GetEnvironmentVariable("WEFT_TEST_EMBED_MODEL");
                var required = !string.IsNullOrEmpty(path);
                if (!required) path = Path.Combine(Path.GetDirectoryName(Path.GetFullPath(modelPath)), "embed.gguf");
                if (!File.Exists(path))
                {
                    var msg = "no embedding model (" + path + "): make it with `weft make-model --preset embed --out " + path + "`";
                    if (required) Check.True(false, msg);
                    else Console.WriteLine("  skipped the embedding model: " + msg);
                    return;
                }
                // Disposed as soon as the executor has it: the executor keeps its own reference.
                var embedModel = Model.Load(path);
                Scenario(model, embedModel, "embed.gguf");
            }
        }

        private static ExecutorParams NewParams(Model embedModel, int batch)
        {
            return new ExecutorParams
            {
                ContextSize = 1024, BatchSize = batch, MaxSequences = 4, Threads = 2,
                Embedder = new EmbedderParams { Model = embedModel, ContextSize = 512, MaxSequences = 8 },
            };
        }

        private static void Scenario(Model model, Model embedModel, string what)
        {
            var rng = new Random(3);
            var tokenizer = embedModel ?? model;  // the embedding model's vocabulary
            int width = tokenizer.Info.EmbeddingSize;
            using (var ex = new Executor(model, NewParams(embedModel, 64)))
            using (var alone = new Executor(model, NewParams(embedModel, 512)))
            {
                Check.Equal(width, ex.EmbeddingSize, what + ": the vectors' width");
                var memories = new[]
                {
                    "the mayor owes three gold coins to the baker",
                    "a wolf was seen in the north forest at night",
                    "the key is hidden under the anvil",
                    "the blacksmith sells silver swords at dawn",
                };
                var tokens = new int[memories.Length][];
                for (int i = 0; i < memories.Length; ++i) tokens[i] = tokenizer.Tokenize(memories[i], addBos: true);
                if (embedModel != null) embedModel.Dispose();
                var tol = Math.Max(8 * NoiseFloor(alone, rng), 1e-10);

                var a = ex.CreateConversation();
                var b = ex.CreateConversation();
                a.Prompt("The baker kneads the dough.", addBos: true);
                b.Prompt("The guard watches the gate.", addBos: true);
                var ga = a.Generate(new GenerateParams { MaxTokens = 12, IgnoreEos = true });
                var gb = b.Generate(new GenerateParams { MaxTokens = 12, IgnoreEos = true });
                var heard = ex.Embed(memories);
                var question = ex.Embed("where is the key");
                long stepTexts = 0, stepTokens = 0;
                for (int s = 0; s < 200 && !(heard.IsDone && question.IsDone && ga.IsDone && gb.IsDone); ++s)
                {
                    var r = ex.Step(new StepBudget { MaxTokens = 1 + rng.Next(64) });
                    stepTexts += r.TextsEmbedded;
                    stepTokens += r.TokensEmbedded;
                }
                Check.True(heard.IsDone && question.IsDone && heard.Error == null, what + ": embedded beside two NPCs");
                Check.Equal(memories.Length, heard.DoneCount, what + ": every memory");
                var vectors = heard.Vectors;
                double worst = 0;
                for (int i = 0; i < memories.Length; ++i)
                {
                    var want = Alone(alone, memories[i]);
                    var d = Check.Nmse(vectors[i], want);
                    worst = Math.Max(worst, d);
                    Check.True(vectors[i].Length == width && d <= tol, what + ": '" + memories[i] + "' as alone: nmse " + d);
                    double sq = 0;
                    foreach (var x in vectors[i]) sq += (double)x * x;
                    Check.True(Math.Abs(sq - 1) < 1e-5, what + ": unit length");
                    Check.Equal(tokens[i].Length, heard.TokenCount(i), what + ": its tokens counted, BOS included");
                    using (var byTokens = alone.EmbedTokens(tokens[i]))
                    {
                        RunUntilDone(alone, byTokens);
                        Check.True(Check.Nmse(byTokens.Vector(0), want) <= tol, what + ": its tokens, the same vector");
                    }
                }
                var q = question.Vector(0);
                int best = 0;
                for (int i = 1; i < memories.Length; ++i)
                {
                    if (Embedding.CosineSimilarity(q, vectors[i]) > Embedding.CosineSimilarity(q, vectors[best])) best = i;
                }
                Console.WriteLine("  " + what + ": " + (memories.Length + 1) + " texts, worst nmse " + worst.ToString("G3")
                                  + " (tolerance " + tol.ToString("G3") + "); nearest to 'where is the key': '"
                                  + memories[best] + "'");
                Check.True(Math.Abs(Embedding.CosineSimilarity(q, q) - 1) < 1e-5, what + ": a vector is like itself");
                float dot = 0;
                for (int k = 0; k < width; ++k) dot += q[k] * vectors[0][k];
                Check.True(Math.Abs(Embedding.CosineSimilarity(q, vectors[0]) - dot) < 1e-5, what + ": the dot product");

                var st = ex.Stats;
                Check.True(st.TextsEmbedded == memories.Length + 1 && st.TextsEmbedded == stepTexts &&
                           st.EmbedTokens == stepTokens && st.EmbedDecodes >= 1 && st.EmbedMs > 0 &&
                           st.EmbedPending == 0, what + ": the stats count what the steps did");
                foreach (var d in new IDisposable[] { heard, question, ga, gb, a, b }) d.Dispose();
            }
        }

        // What batching alone does here: 8 texts in one decode against each alone.
        private static double NoiseFloor(Executor alone, Random rng)
        {
            var texts = new string[8];
            for (int i = 0; i < texts.Length; ++i) texts[i] = RandomText(rng, 1, 24);
            double worst = 0;
            using (var e = alone.Embed(texts))
            {
                Check.Equal(8, alone.Step().TextsEmbedded, "the floor's 8 texts in one decode");
                for (int i = 0; i < texts.Length; ++i) worst = Math.Max(worst, Check.Nmse(e.Vector(i), Alone(alone, texts[i])));
            }
            return worst;
        }

        private static string RandomText(Random rng, int min, int max)
        {
            var n = rng.Next(min, max + 1);
            var w = new string[n];
            for (int i = 0; i < n; ++i) w[i] = Words[rng.Next(Words.Length)];
            return string.Join(" ", w);
        }

        private static float[] Alone(Executor alone, string text)
        {
            using (var e = alone.Embed(text))
            {
                RunUntilDone(alone, e);
                return e.Vector(0);
            }
        }

        private static void RunUntilDone(Executor ex, Embedding e)
        {
            for (int i = 0; i < 1000 && !e.IsDone; ++i) ex.Step();
            Check.True(e.IsDone && e.Error == null, "embedded");
        }

        private static void Refusals(Model model)
        {
            using (var none = new Executor(model, new ExecutorParams { ContextSize = 256, BatchSize = 64, MaxSequences = 2, Threads = 2 }))
            {
                Check.Throws(Status.InvalidArgument, "no embedder", () => none.Embed("x"), "an executor without an embedder");
                Check.Equal(0, none.EmbeddingSize, "no width without an embedder");
            }
            var bad = NewParams(null, 64);
            bad.Embedder.ContextSize = 4;
            Check.Throws(Status.InvalidArgument, "n_ctx = 4", () => new Executor(model, bad).Dispose(), "ContextSize 4");
            bad.Embedder.ContextSize = 16;
            bad.Embedder.Pooling = (Pooling)9;
            Check.Throws(Status.InvalidArgument, "embed_pooling = 9", () => new Executor(model, bad).Dispose(), "a pooling that is none");
            bad.Embedder.Pooling = Pooling.Mean;
            using (var ex = new Executor(model, bad))
            {
                Check.Throws(Status.InvalidArgument, "no texts", () => ex.Embed(), "no texts");
                Check.Throws(Status.NullArg, "texts[1]", () => ex.Embed("short", null), "a null text");
                Check.Throws(Status.OutOfRange, "text 1 has", () => ex.Embed("short", string.Join(" ", Words)), "a text over ContextSize");
                Check.Throws(Status.InvalidArgument, "input 1 is empty", () => ex.EmbedTokens(new[] { 1, 2 }, new int[0]), "an empty input");
                Check.Throws(Status.OutOfRange, "holds token " + model.VocabSize, () => ex.EmbedTokens(new[] { 1, model.VocabSize }),
                             "a token outside the vocabulary");
                Check.Throws<ArgumentNullException>(() => ex.Embed(null), "a null array");
                Check.Equal(0, ex.Stats.EmbedPending, "nothing refused was queued");
                using (var e = ex.EmbedTokens(new[] { 1, 5, 9 }))
                {
                    Check.True(e.Vector(0) == null && e.Count == 1 && e.DoneCount == 0, "nothing before a step");
                    Check.Throws<ArgumentOutOfRangeException>(() => e.Vector(1), "past the inputs");
                    RunUntilDone(ex, e);
                    Check.Equal(ex.EmbeddingSize, e.Vector(0).Length, "then its vector");
                }
                Check.Throws(Status.InvalidArgument, "2 and 1", () => Embedding.CosineSimilarity(new float[] { 1, 2 }, new float[] { 1 }),
                             "vectors of unequal widths");
                Check.Equal(0f, Embedding.CosineSimilarity(new float[] { 1, 2 }, new float[] { 0, 0 }), "a zero vector");
            }
        }

        private static void Lifetime(Model model)
        {
            Embedding pending, made;
            using (var ex = new Executor(model, NewParams(null, 64)))
            {
                using (var c = ex.Embed("the mayor owes gold"))
                {
                    c.Cancel();
                    Check.True(c.IsDone && c.Error != null && c.Error.Code == Status.Cancelled, "Cancel: done, Cancelled");
                    while (!ex.Step().Idle) { }
                    Check.True(c.DoneCount == 0 && c.Vector(0) == null, "nothing embedded after Cancel");
                }
                made = ex.Embed("song of the tavern");
                RunUntilDone(ex, made);
                ex.Start();  // the worker: it embeds without anyone stepping
                using (var w = ex.Embed("the wolf of the north", "bread at the market"))
                {
                    Check.True(w.Wait(TimeSpan.FromSeconds(20)) && w.DoneCount == 2, "the worker embedded them");
                }
                ex.Stop();
                pending = ex.Embed("the river gate at night");  // still queued when the executor goes
            }
            Check.True(pending.Wait(TimeSpan.FromSeconds(1)), "done once the executor is gone");
            Check.True(pending.Error != null && pending.Error.Code == Status.Disposed, "Disposed: " + pending.Error);
            Check.True(made.Vector(0) != null && made.Vector(0).Length == made.Dimensions, "what was made stays readable");
            pending.Dispose();
            made.Dispose();
            Check.Throws<ObjectDisposedException>(() => { var x = made.IsDone; }, "use after Dispose");
        }
    }
}
