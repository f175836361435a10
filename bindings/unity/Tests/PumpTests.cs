// PumpTests.cs — EventPump in steady state allocates nothing: a thread
// steps 8 generating NPCs at frame cadence (one token each per step) while
// the main thread polls at 60 Hz into reused buffers and appends text to
// StringBuilders. Bytes allocated by the main thread and gen-0 collections
// in the whole process are counted over 200 frames after a warm-up.
using System;
using System.Text;
using System.Threading;
using Weft.Samples;

namespace Weft.UnityTests
{
    internal static class PumpTests
    {
        private static int IndexOf(ulong[] ids, ulong id)
        {
            for (int k = 0; k < ids.Length; ++k) if (ids[k] == id) return k;
            return -1;
        }

        private static string Decode(params byte[] b)
        {
            var chars = new char[b.Length];
            return new string(chars, 0, EventPump.DecodeUtf8(b, 0, b.Length, chars, 0));
        }

        // The hand-written UTF-8 decoder: as the framework's on valid text,
        // one U+FFFD per invalid sequence, never more chars than bytes.
        private static void DecoderChecks()
        {
            foreach (var s in new[] { "", "plain", "héllo wörld", "€ ≠ ∞", "🙂 emoji 𝄞", "日本語のテキスト" })
                Check.Equal(s, Decode(Encoding.UTF8.GetBytes(s)), "decodes \"" + s + "\"");
            Check.Equal("A\uFFFDB", Decode(0x41, 0xFF, 0x42), "a stray byte");
            Check.Equal("\uFFFD", Decode(0xE2, 0x82), "a sequence cut short");
            Check.Equal("\uFFFDx", Decode(0xE2, 0x82, 0x78), "a sequence broken by ASCII");
            Check.Equal("\uFFFD", Decode(0xC0, 0x80), "an overlong form");
            Check.Equal("\uFFFD", Decode(0xED, 0xA0, 0x80), "an encoded surrogate");
            Check.Equal("\uFFFD", Decode(0xF4, 0x90, 0x80, 0x80), "past U+10FFFF");
        }

        public static void SteadyState(string model)
        {
            DecoderChecks();
            const int Npcs = 8, Warm = 30, Frames = 200;
            using (var m = Model.Load(model))
            using (var ex = new Executor(m, new ExecutorParams { ContextSize = 2048, MaxSequences = Npcs, Events = true, Threads = 1 }))
            {
                var text = new StringBuilder[Npcs];
                var ids = new ulong[Npcs];
                var gens = new Generation[Npcs];
                for (int i = 0; i < Npcs; ++i)
                {
                    var c = ex.CreateConversation();
                    c.Prompt("NPC " + i + " says:", addBos: true);
                    ids[i] = c.Id;
                    text[i] = new StringBuilder(4096);
                    gens[i] = c.Generate(new GenerateParams { MaxTokens = 200, Sampler = new SamplerParams { Temperature = 0.8f, Seed = (uint)i } });
                }
                var stop = false;
                var stepper = new Thread(() =>
                {
                    var budget = new StepBudget { MaxTokens = Npcs };
                    while (!Volatile.Read(ref stop)) { ex.Step(budget); Thread.Sleep(16); }
                });
                stepper.Start();
                var pump = new EventPump();
                int tokens = 0, gc0 = 0;
                long bytes = 0;
                for (int f = 0; f < Warm + Frames; ++f)
                {
                    if (f == Warm) gc0 = GC.CollectionCount(0);
                    long before = GC.GetAllocatedBytesForCurrentThread();
                    int n = pump.Poll(ex);
                    for (int i = 0; i < n; ++i)
                    {
                        if (pump[i].Kind != EventKind.Token) continue;
                        int k = IndexOf(ids, pump[i].ConversationId);
                        if (k >= 0) pump.AppendText(i, text[k]);
                        if (f >= Warm) ++tokens;
                    }
                    if (f >= Warm) bytes += GC.GetAllocatedBytesForCurrentThread() - before;
                    Thread.Sleep(16);
                }
                int gc1 = GC.CollectionCount(0);
                Volatile.Write(ref stop, true);
                stepper.Join();
                Console.WriteLine("  pump: " + tokens + " tokens in " + Frames + " frames, " + bytes +
                                  " bytes allocated, gen-0 collections " + gc0 + " -> " + gc1);
                Check.True(tokens >= Frames, "tokens polled in the measured frames: " + tokens);
                Check.Equal(0L, bytes, "bytes the main thread allocated polling");
                Check.Equal(gc0, gc1, "gen-0 collections over the measured frames");
                // No step runs now: one last poll, then the text assembled from
                // events is each generation's text, exactly.
                int last = pump.Poll(ex);
                for (int i = 0; i < last; ++i)
                {
                    int k = IndexOf(ids, pump[i].ConversationId);
                    if (k >= 0 && pump[i].Kind == EventKind.Token) pump.AppendText(i, text[k]);
                }
                Check.Equal(0L, ex.Stats.EventsDropped, "events dropped");
                for (int i = 0; i < Npcs; ++i)
                    Check.True(text[i].Length > 0 && gens[i].Text == text[i].ToString(),
                               "NPC " + i + ": the pumped text is its generation's");
            }
        }
    }
}
