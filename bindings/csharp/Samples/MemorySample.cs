// The innkeeper's memory: what she heard is added to a Memory (embedded by
// the executor's steps, or with vectors of the caller's own), found again by
// cosine similarity, saved alone and with her conversation; her history is
// compacted to the system prompt, a summary and the last turns. Checked:
// vector search equals a brute force over random vectors; every fact added
// through the executor is its own best hit; Save/Load keeps every entry and
// damaged bytes are Status.Corrupt; Conversation.Memory names the same store
// and travels through Conversation.Save/Executor.Load; Compact leaves first +
// summary + last tokens and refuses keeps past the history. The embedder is
// embed.gguf ($WEFT_TEST_EMBED_MODEL, else beside the model) or the model's
// own hidden states when there is none.
using System;
using System.IO;
using System.Linq;
using Weft;

namespace Weft.Samples
{
    internal static class MemorySample
    {
        public static void Run(string modelPath)
        {
            VectorSearch();
            using (var model = Model.Load(modelPath))
            {
                var path = Environment.GetEnvironmentVariable("WEFT_TEST_EMBED_MODEL");
                if (string.IsNullOrEmpty(path))
                    path = Path.Combine(Path.GetDirectoryName(Path.GetFullPath(modelPath)), "embed.gguf");
                Model embedModel = File.Exists(path) ? Model.Load(path) : null;
                if (embedModel == null) Console.WriteLine("  no embed.gguf: the model's own states are pooled");
                Facts(model, embedModel);
                if (embedModel != null) embedModel.Dispose();
                WithConversation(model);
                Compact(model);
            }
        }

        private static double Cosine(float[] a, float[] b)
        {
            double d = 0, na = 0, nb = 0;
            for (int i = 0; i < a.Length; ++i)
            {
                d += (double)a[i] * b[i];
                na += (double)a[i] * a[i];
                nb += (double)b[i] * b[i];
            }
            return na == 0 || nb == 0 ? 0 : d / Math.Sqrt(na * nb);
        }

        private static void VectorSearch()
        {
            const int Dim = 12, N = 200, K = 8;
            var rng = new Random(5);
            var vecs = new float[N][];
            using (var mem = new Memory())
            {
                for (int i = 0; i < N; ++i)
                {
                    vecs[i] = new float[Dim];
                    for (int j = 0; j < Dim; ++j) vecs[i][j] = (float)(rng.NextDouble() * 2 - 1);
                    Check.Equal((ulong)(i + 1), mem.Add("memory " + i, vecs[i], "t=" + i), "ids grow from 1");
                }
                Check.Equal(N, mem.Count, "entries");
                Check.Equal(Dim, mem.Dimensions, "width");
                Check.Equal("memory 7", mem.Text(8), "Text");
                Check.Equal("t=7", mem.Metadata(8), "Metadata");
                Check.True(mem.Vector(8).SequenceEqual(vecs[7]), "Vector");
                for (int q = 0; q < 10; ++q)
                {
                    var query = new float[Dim];
                    for (int j = 0; j < Dim; ++j) query[j] = (float)(rng.NextDouble() * 2 - 1);
                    var expect = Enumerable.Range(0, N).OrderByDescending(i => Cosine(query, vecs[i])).ThenBy(i => i)
                                     .Take(K).ToArray();
                    var hits = mem.Search(query, K);
                    Check.Equal(K, hits.Length, "hits");
                    for (int j = 0; j < K; ++j)
                    {
                        Check.Equal((ulong)(expect[j] + 1), hits[j].Id, "query " + q + " hit " + j + " = brute force");
                        Check.Equal("memory " + expect[j], hits[j].Text, "its text");
                        Check.True(Math.Abs(hits[j].Score - Cosine(query, vecs[expect[j]])) < 1e-5, "its score");
                    }
                }
                Check.Throws(Status.InvalidArgument, "13", () => mem.Search(new float[Dim + 1], K), "another width");
                Check.Throws(Status.NotFound, "9999", () => mem.Text(9999), "an absent id");

                var bytes = mem.Save();
                using (var back = Memory.Load(bytes))
                {
                    Check.Equal(N, back.Count, "loaded entries");
                    var q0 = vecs[3];
                    Check.True(mem.Search(q0, 5).Select(h => h.Id).SequenceEqual(back.Search(q0, 5).Select(h => h.Id)),
                               "loaded search = saved search");
                    Check.Equal((ulong)4, back.Search(q0, 1)[0].Id, "loaded: an entry's own vector finds it");
                    Check.True(back.Remove(4) && !back.Remove(4), "Remove");
                    Check.Equal(N - 1, back.Count, "after Remove");
                    Check.Equal(N, mem.Count, "a loaded store is its own");
                }
                var bad = (byte[])bytes.Clone();
                bad[bad.Length / 2] ^= 0x5a;
                Check.Throws(Status.Corrupt, "", () => Memory.Load(bad), "damaged bytes");
                mem.Clear();
                Check.Equal(0, mem.Count, "Clear");
            }
        }

        private static readonly string[] Heard =
        {
            "the mayor owes three gold coins to the baker",
            "a wolf was seen in the north forest at night",
            "the key is hidden under the anvil",
            "the blacksmith sells silver swords at dawn",
        };

        private static void Facts(Model model, Model embedModel)
        {
            var p = new ExecutorParams
            {
                ContextSize = 1024, BatchSize = 64, MaxSequences = 4, Threads = 2,
                Embedder = new EmbedderParams { Model = embedModel, ContextSize = 256, MaxSequences = 8 },
            };
            using (var ex = new Executor(model, p))
            using (var mem = new Memory())
            {
                var ids = Heard.Select(t => mem.Add(ex, t, "heard")).ToArray();
                Check.Equal(Heard.Length, mem.PendingCount, "queued");
                for (int i = 0; i < 1000 && mem.PendingCount > 0; ++i) ex.Step();
                Check.Equal(0, mem.PendingCount, "all embedded");
                Check.Equal(ex.EmbeddingSize, mem.Dimensions, "the embedder's width");
                for (int i = 0; i < Heard.Length; ++i)
                {
                    using (var s = mem.Search(ex, Heard[i], 2))
                    {
                        for (int n = 0; n < 1000 && !s.IsReady; ++n) ex.Step();
                        Check.True(s.Wait(TimeSpan.Zero), "search ready");
                        Check.True(s.Error == null, "no error");
                        var hits = s.Hits;
                        Check.Equal(2, hits.Length, "two hits");
                        Check.Equal(ids[i], hits[0].Id, "'" + Heard[i] + "' finds itself");
                        Check.Equal("heard", hits[0].Metadata, "its metadata");
                        Check.True(hits[0].Score > 0.999f, "score ~1: " + hits[0].Score);
                    }
                }
            }
        }

        private static void WithConversation(Model model)
        {
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 512, MaxSequences = 4, Threads = 2 }))
            using (var c = ex.CreateConversation())
            {
                c.Prompt("You are the innkeeper.", addBos: true);
                while (!ex.Step().Idle) { }
                Check.True(c.Memory == null, "no memory by default");
                using (var mem = new Memory())
                {
                    mem.Add("the key is under the anvil", new float[] { 1, 0, 0 }, "day 1");
                    c.Memory = mem;
                    mem.Add("the mayor owes gold", new float[] { 0, 1, 0 }, "day 2");  // after: the same store
                    using (var got = c.Memory) Check.Equal(2, got.Count, "Conversation.Memory names the same store");
                    var state = c.Save();
                    using (var back = ex.Load(state))
                    using (var carried = back.Memory)
                    {
                        Check.True(carried != null, "the memory came back with the conversation");
                        Check.Equal(2, carried.Count, "its entries");
                        Check.Equal("day 2", carried.Metadata(2), "its metadata");
                    }
                    c.Memory = null;
                    Check.True(c.Memory == null, "removed");
                }
            }
        }

        private static void Compact(Model model)
        {
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 512, MaxSequences = 4, Threads = 2 }))
            using (var c = ex.CreateConversation())
            {
                var rng = new Random(9);
                var history = Enumerable.Range(0, 40).Select(_ => 3 + rng.Next(model.Info.VocabSize - 3)).ToArray();
                c.Prompt(history);
                while (!ex.Step().Idle) { }
                const string summary = " the mayor owes three gold coins";
                var summaryTokens = model.Tokenize(summary);
                Check.Throws(Status.OutOfRange, "keep_first 30 + keep_last 20", () => c.Compact(30, 20, summary),
                             "keeps past the history");
                c.Compact(5, 10, summary);
                var expect = history.Take(5).Concat(summaryTokens).Concat(history.Skip(30)).ToArray();
                Check.SameTokens(expect, c.Tokens, "first 5 + summary + last 10");
                while (!ex.Step().Idle) { }
                Check.Equal(0, c.QueuedCount, "the rest decoded");
            }
        }
    }
}
