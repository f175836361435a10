// The binding's contract: models and tokens, errors as WeftException with a
// Code, what disposal does, the pressure and log callbacks, many threads.
using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using Weft;
using Bias = System.Collections.Generic.Dictionary<int, float>;

namespace Weft.Samples
{
    internal static class BasicsSample
    {
        public static void Run(string modelPath)
        {
            var logLines = new List<string>();
            Library.SetLogCallback((level, line) => { lock (logLines) logLines.Add(level + ": " + line); }, LogLevel.Info);
            using (var model = Model.Load(modelPath))
            {
                Library.SetLogCallback(null);
                lock (logLines) Check.True(logLines.Count > 0, "llama.cpp's load log reached the C# sink");
                Console.WriteLine("  " + model.Description + ", " + model.VocabSize + " tokens, " + logLines.Count + " log lines");

                var info = model.Info;
                Check.Equal(32000, info.VocabSize, "vocabulary");
                Check.Equal(2, info.LayerCount, "layers");
                Check.True(info.Memory == ModelMemory.Plain && info.SlidingWindow == 0, "plain attention");
                Check.Equal("llama", model.Meta("general.architecture"), "architecture");
                Check.SameTokens(new[] { 1, 15043, 3186 }, model.Tokenize("Hello world", addBos: true), "tokenize");
                Check.True(model.Detokenize(new[] { 15043, 3186 }).Contains("Hello world"), "detokenize");
                Check.Equal(" Hello", Encoding.UTF8.GetString(model.TokenPiece(15043)), "token piece");
                Check.True(model.IsEndOfGeneration(info.Eos), "EOS ends a generation");

                Errors(model, modelPath);
                IgnoreEos(model);
                JsonSchema(model);
                LogitBias(model);
                Logprobs(model);
                SamplingStages(model);
                BannedStrings(model);
                OnFinish(model);
                Pressure(model);
                ManyThreads(model);
            }
        }

        private static ExecutorParams Small(int ctx = 512, int seqs = 4)
        {
            return new ExecutorParams { ContextSize = ctx, BatchSize = 64, MaxSequences = seqs, Threads = 2 };
        }

        // Where a grammar admits only an end token, IgnoreEos ends the generation
        // in an error (nothing else may be sampled); without it, at the end token.
        private static void IgnoreEos(Model model)
        {
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("Once upon a time", addBos: true);
                using (var b = a.Fork())
                {
                    var yesNo = new SamplerParams { Grammar = "root ::= \"yes\" | \"no\"" };
                    using (var ga = a.Generate(new GenerateParams { MaxTokens = 10, Sampler = yesNo, IgnoreEos = true }))
                    using (var gb = b.Generate(new GenerateParams { MaxTokens = 10, Sampler = yesNo }))
                    {
                        while (!ex.Step().Idle) { }
                        Check.Equal(FinishReason.Error, ga.Reason, "IgnoreEos: no end token to sample");
                        Check.True(ga.Error != null && ga.Error.Code == Status.InvalidArgument, "IgnoreEos: invalid_argument");
                        Check.Equal(FinishReason.EndOfGeneration, gb.Reason, "without IgnoreEos: the end token");
                    }
                }
            }
        }

        // JsonSchema constrains a generation to JSON the schema admits (at
        // temperature 1, over seeds); a bad schema or one beside a Grammar is
        // an InvalidArgument naming it.
        private static void JsonSchema(Model model)
        {
            const string schema = "{\"type\": \"object\", \"properties\": {\"give\": {\"enum\": [\"sword\", \"bread\"]}, " +
                "\"count\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 3}}, \"required\": [\"give\", \"count\"], " +
                "\"additionalProperties\": false}";
            var answers = new System.Text.RegularExpressions.Regex(
                "^\\{\\s*\"give\"\\s*:\\s*\"(sword|bread)\"\\s*,\\s*\"count\"\\s*:\\s*[1-3]\\s*\\}$");
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("The merchant hands over", addBos: true);
                for (uint seed = 1; seed <= 4; ++seed)
                {
                    using (var b = a.Fork())
                    using (var g = b.Generate(new GenerateParams
                    {
                        MaxTokens = 80,
                        Sampler = new SamplerParams { Temperature = 1.0f, Seed = seed, JsonSchema = schema },
                    }))
                    {
                        while (!ex.Step().Idle) { }
                        Check.Equal(FinishReason.EndOfGeneration, g.Reason, "JsonSchema: the generation ends");
                        Check.True(answers.IsMatch(g.Text), "JsonSchema: '" + g.Text + "' fits the schema");
                    }
                }
                Check.Throws(Status.InvalidArgument, "JSON schema at #/properties/n/type: unknown type 'strin'",
                    () => a.SetSampler(new SamplerParams { JsonSchema = "{\"properties\": {\"n\": {\"type\": \"strin\"}}}" }),
                    "JsonSchema: a bad schema");
                Check.Throws(Status.InvalidArgument, "grammar and SamplerParams.json_schema are both set",
                    () => a.SetSampler(new SamplerParams { JsonSchema = schema, Grammar = "root ::= \"x\"" }),
                    "JsonSchema: beside a Grammar");
            }
        }

        // LogitBias: greedy picks the argmax of the logits plus the bias, and
        // GetLogits() stays unbiased; a banned token is never drawn at a
        // temperature; the refusals name the entry.
        private static void LogitBias(Model model)
        {
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("The merchant hands over", addBos: true);
                while (!ex.Step().Idle) { }
                var logits = a.GetLogits();
                int top = 0;
                for (int i = 1; i < logits.Length; ++i) if (logits[i] > logits[top]) top = i;
                int boosted = top == 500 ? 501 : 500;
                var bias = new Bias
                {
                    { top, float.NegativeInfinity },
                    { boosted, logits[top] - logits[boosted] - 0.25f },  // just under the banned top
                    { 7, 2.0f },
                };
                a.SetSampler(new SamplerParams { LogitBias = bias });
                var biased = (float[])logits.Clone();
                foreach (var kv in bias)
                    biased[kv.Key] = float.IsNegativeInfinity(kv.Value) ? float.NegativeInfinity : biased[kv.Key] + kv.Value;
                int want = 0;
                for (int i = 1; i < biased.Length; ++i) if (biased[i] > biased[want]) want = i;
                Check.Equal(want, a.Sample(), "LogitBias: greedy is the argmax of the logits plus the bias");
                Check.True(want != top, "LogitBias: the ban moved the choice");
                Check.SameLogits(logits, a.GetLogits(), "LogitBias: the conversation's logits stay unbiased");
                for (uint seed = 1; seed <= 8; ++seed)
                {
                    a.SetSampler(new SamplerParams { Temperature = 1.0f, TopK = 3, Seed = seed,
                        LogitBias = new Bias { { top, float.NegativeInfinity } } });
                    for (int i = 0; i < 20; ++i) Check.True(a.Sample() != top, "LogitBias: a banned token is never drawn");
                }
                Check.Throws(Status.InvalidArgument, "SamplerParams.logit_bias[0].bias (token 3) is NaN; it must be finite or -inf",
                    () => a.SetSampler(new SamplerParams { LogitBias = new Bias { { 3, float.NaN } } }),
                    "LogitBias: NaN");
                Check.Throws(Status.OutOfRange, "SamplerParams.logit_bias[0].token = 32000 is outside the vocabulary [0, 32000)",
                    () => a.SetSampler(new SamplerParams { LogitBias = new Bias { { 32000, 1.0f } } }),
                    "LogitBias: outside the vocabulary");
                var many = new Bias();
                for (int t = 0; t < 1025; ++t) many[t] = 1.0f;
                Check.Throws(Status.InvalidArgument, "n_logit_bias = 1025; at most 1024 are taken",
                    () => a.SetSampler(new SamplerParams { LogitBias = many }), "LogitBias: too many");
            }
        }

        // Logprobs: the record's token is the sampled one, its logprob the
        // log-softmax of the logits read before (computed here in double),
        // the top list most likely first; past the records is OutOfRange.
        private static void Logprobs(Model model)
        {
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("The merchant said", addBos: true);
                while (!ex.Step().Idle) { }
                for (int step = 0; step < 3; ++step)
                {
                    var logits = a.GetLogits();
                    double max = double.NegativeInfinity, sum = 0;
                    foreach (var l in logits) max = Math.Max(max, l);
                    foreach (var l in logits) sum += Math.Exp(l - max);
                    using (var g = a.Generate(new GenerateParams { MaxTokens = 1, Logprobs = true, TopLogprobs = 3 }))
                    {
                        while (!ex.Step().Idle) { }
                        Check.True(g.Wait(TimeSpan.FromSeconds(60)), "Logprobs: done");
                        var rec = g.Logprob(0);
                        Check.Equal(g.Tokens[0], rec.Token, "Logprobs: the record is the sampled token's");
                        Check.True(Math.Abs(rec.Logprob - (logits[rec.Token] - max - Math.Log(sum))) < 1e-5,
                            "Logprobs: the log-softmax of the logits it came from");
                        Check.Equal(3, rec.Top.Length, "Logprobs: three alternatives");
                        Check.Equal(rec.Token, rec.Top[0].Token, "Logprobs: greedy took the most likely");
                        Check.True(rec.Top[1].Logprob >= rec.Top[2].Logprob, "Logprobs: most likely first");
                        Check.Throws(Status.OutOfRange, "past the generation's 1 logprob records", () => g.Logprob(1),
                            "Logprobs: past the records");
                    }
                }
            }
        }

        // typical_p, XTC, DRY and mirostat: off by default; set, they change
        // the draw for a seed, and a saved state (version 10) draws as the
        // original; a bad value names its field.
        private static void SamplingStages(Model model)
        {
            var d = new SamplerParams();
            Check.True(d.TypicalP == 1.0f && d.XtcProbability == 0.0f && d.DryMultiplier == 0.0f && d.DryBase == 1.75f &&
                       d.DryAllowedLength == 2 && d.DryPenaltyLastN == -1 && d.DrySequenceBreakers == null &&
                       d.Mirostat == 0 && d.MirostatTau == 5.0f, "SamplingStages: defaults");
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("The smith said the smith said the", addBos: true);
                while (!ex.Step().Idle) { }
                using (var b = a.Fork())
                {
                    while (!ex.Step().Idle) { }
                    a.SetSampler(new SamplerParams { Temperature = 1.0f, Seed = 21 });
                    b.SetSampler(new SamplerParams { Temperature = 1.0f, Seed = 21, TypicalP = 0.9f, XtcProbability = 0.5f,
                        XtcThreshold = 0.001f, DryMultiplier = 0.8f, DrySequenceBreakers = new[] { "." },
                        Mirostat = 2, MirostatTau = 4.0f, MirostatEta = 0.2f });
                    int differ = 0;
                    for (int i = 0; i < 16; ++i) differ += a.Sample() != b.Sample() ? 1 : 0;
                    Check.True(differ > 0, "SamplingStages: they change the draw");
                    var saved = b.Save();
                    Check.Equal(10, (int)saved[8], "SamplingStages: state version 10");
                    using (var back = ex.Load(saved))
                    {
                        for (int i = 0; i < 12; ++i) Check.Equal(b.Sample(), back.Sample(), "SamplingStages: loaded draws as the original");
                    }
                    Check.Throws(Status.InvalidArgument, "SamplerParams.mirostat = 1",
                        () => a.SetSampler(new SamplerParams { Temperature = 1.0f, Mirostat = 1 }), "SamplingStages: mirostat 1");
                    Check.Throws(Status.InvalidArgument, "dry_sequence_breakers[0] is 0 bytes",
                        () => a.SetSampler(new SamplerParams { DrySequenceBreakers = new[] { "" } }), "SamplingStages: empty breaker");
                }
            }
        }

        // BannedStrings: a greedy reply with two bytes of the unbanned reply
        // banned holds neither and differs; a sampler with them saves as
        // version 12; an empty string is refused.
        private static void BannedStrings(Model model)
        {
            Check.True(new SamplerParams().BannedStrings == null, "BannedStrings: default none");
            using (var ex = new Executor(model, Small()))
            {
                var plain = Reply(ex, null);
                // Two ASCII characters from the plain reply (no half of a surrogate pair).
                string ban = null;
                for (int i = plain.Length / 2; i + 1 < plain.Length && ban == null; ++i)
                    if (plain[i] < 128 && plain[i + 1] < 128) ban = plain.Substring(i, 2);
                for (int i = 0; i + 1 < plain.Length && ban == null; ++i)
                    if (plain[i] < 128 && plain[i + 1] < 128) ban = plain.Substring(i, 2);
                Check.True(ban != null, "BannedStrings: two ASCII characters in '" + plain + "'");
                if (ban == null) return;
                var banned = Reply(ex, new[] { ban });
                Check.True(!banned.Contains(ban) && banned != plain, "BannedStrings: '" + ban + "' not in '" + banned + "'");
                using (var c = ex.CreateConversation())
                {
                    c.Prompt("The smith said", addBos: true);
                    c.SetSampler(new SamplerParams { BannedStrings = new[] { ban } });
                    while (!ex.Step().Idle) { }
                    Check.Equal(12, (int)c.Save()[8], "BannedStrings: state version 12");
                    Check.Throws(Status.InvalidArgument, "banned_strings[0] is 0 bytes",
                        () => c.SetSampler(new SamplerParams { BannedStrings = new[] { "" } }), "BannedStrings: empty");
                }
            }
        }

        private static string Reply(Executor ex, string[] bans)
        {
            using (var c = ex.CreateConversation())
            {
                c.Prompt("The smith said", addBos: true);
                using (var g = c.Generate(new GenerateParams { MaxTokens = 16, IgnoreEos = true,
                    Sampler = new SamplerParams { BannedStrings = bans } }))
                {
                    while (!ex.Step().Idle) { }
                    return g.Text;
                }
            }
        }

        // OnFinish runs once per generation, after its last OnToken, with the
        // reason it ended: at max tokens, and when cancelled between steps.
        private static void OnFinish(Model model)
        {
            using (var ex = new Executor(model, Small()))
            using (var a = ex.CreateConversation())
            {
                a.Prompt("Once upon a time", addBos: true);
                using (var b = a.Fork())
                {
                    var ends = new List<FinishReason>[] { new List<FinishReason>(), new List<FinishReason>() };
                    var tokensAtEnd = new int[2];
                    var tokens = new int[2];
                    var gens = new Generation[2];
                    for (int i = 0; i < 2; ++i)
                    {
                        int k = i;
                        gens[i] = (i == 0 ? a : b).Generate(new GenerateParams
                        {
                            MaxTokens = i == 0 ? 4 : 100,
                            IgnoreEos = true,  // so neither ends at an end token
                            OnToken = (t, s) => { ++tokens[k]; },
                            OnFinish = r => { ends[k].Add(r); tokensAtEnd[k] = tokens[k]; },
                        });
                    }
                    ex.Step();
                    ex.Step();
                    Check.Equal(0, ends[1].Count, "not finished yet");
                    gens[1].Cancel();
                    Check.Equal(0, ends[1].Count, "OnFinish runs on the stepping thread, at the next step");
                    while (!ex.Step().Idle) { }
                    Check.Equal(1, ends[0].Count, "once");
                    Check.Equal(FinishReason.MaxTokens, ends[0][0], "at MaxTokens");
                    Check.Equal(4, tokensAtEnd[0], "after every OnToken");
                    Check.Equal(1, ends[1].Count, "once, cancelled");
                    Check.Equal(FinishReason.Cancelled, ends[1][0], "cancelled");
                    Check.Equal(gens[1].TokenCount, tokensAtEnd[1], "after every OnToken (cancelled)");
                    foreach (var g in gens) g.Dispose();
                }
            }
        }

        private static void Errors(Model model, string modelPath)
        {
            Check.Throws(Status.NotFound, "/nonexistent.gguf", () => Model.Load("/nonexistent.gguf"), "missing model");
            Check.Throws(Status.InvalidArgument, "'/tmp' is a directory", () => Model.Load("/tmp"), "directory as a model");
            Check.Throws(Status.Cancelled, "cancelled", () => Model.Load(modelPath,
                new ModelParams { UseMmap = false, OnProgress = p => false }), "load cancelled by progress");
            Check.Throws(Status.InvalidArgument, "n_batch = 2",
                () => new Executor(model, new ExecutorParams { BatchSize = 2, MaxSequences = 4 }), "bad executor params");
            Check.Throws(Status.InvalidArgument, "not valid UTF-8: byte 1",
                () => model.TokenizeUtf8(new byte[] { 0x41, 0xC3 }), "truncated UTF-8");

            var ex = new Executor(model, Small());
            // FlashAttention.Auto on the CPU: both kernels timed, the faster one used
            // (unless WEFT_FLASH_ATTN says which, as the test presets do).
            var st = ex.Stats;
            var env = System.Environment.GetEnvironmentVariable("WEFT_FLASH_ATTN");
            if (env == "on" || env == "off")
            {
                Check.Equal(AttentionSource.Environment, st.FlashAttentionSource, "WEFT_FLASH_ATTN overrides Auto");
                Check.Equal(env == "on" ? FlashAttention.Enabled : FlashAttention.Disabled, st.FlashAttention, "as the environment says");
            }
            else
            {
                Check.True(st.FlashAttentionSource == AttentionSource.Measured || st.FlashAttentionSource == AttentionSource.Remembered,
                    "Auto measured the attention kernels");
                Check.Equal(st.FlashAttentionProbeMs <= st.PlainAttentionProbeMs ? FlashAttention.Enabled : FlashAttention.Disabled,
                    st.FlashAttention, "the faster kernel was chosen");
                Check.Equal(4, st.AttentionProbeSeqs, "the probe's conversations are the executor's slots");
            }
            using (var asked = new Executor(model, new ExecutorParams { ContextSize = 256, BatchSize = 32, MaxSequences = 2,
                Threads = 1, FlashAttention = FlashAttention.Disabled, TuningCacheDir = "" }))
            {
                Check.Equal(AttentionSource.Asked, asked.Stats.FlashAttentionSource, "an explicit kernel is not probed");
                Check.Equal(FlashAttention.Disabled, asked.Stats.FlashAttention, "as asked");
            }
            var c = ex.CreateConversation();
            Check.Throws(Status.OutOfRange, "cannot rewind 5 tokens, it has 0", () => c.Rewind(5), "rewind past the start");
            Check.Throws(Status.InvalidArgument, "no logits yet", () => c.GetLogits(), "logits before any decode");
            Check.Throws(Status.InvalidArgument, "not valid UTF-8", () => c.PromptUtf8(new byte[] { 0xFF, 0x41 }), "invalid UTF-8 prompt");
            Check.Throws(Status.InvalidArgument, "is empty", () => c.Generate(), "generate on an empty conversation");
            Check.Throws(Status.OutOfRange, "40000", () => c.Prompt(new[] { 40000 }), "token outside the vocabulary");
            Check.Throws(Status.InvalidArgument, "temperature",
                () => c.SetSampler(new SamplerParams { Temperature = -1 }), "bad sampler");
            Check.Throws(Status.InvalidArgument, "max_tokens = 0",
                () => { c.Prompt("x"); c.Generate(new GenerateParams { MaxTokens = 0 }); }, "max_tokens 0");
            Check.Throws(Status.InvalidArgument, "stop string",
                () => c.Generate(new GenerateParams { Stop = new[] { "" } }), "empty stop string");
            var budget = new StepBudget { MaxTokens = 65 };
            Check.Throws(Status.InvalidArgument, "max_tokens = 65", () => ex.Step(budget), "budget past n_batch");
            // MaxTokens = 0 (the default) means n_batch, as in C++ and C.
            var longPrompt = ex.CreateConversation();
            var toks = new int[100];
            for (int i = 0; i < toks.Length; ++i) toks[i] = 100 + i;
            longPrompt.Prompt(toks);
            Check.Equal(64, ex.Step(new StepBudget { MaxTokens = 0 }).TokensDecoded, "MaxTokens 0 = n_batch");
            longPrompt.Dispose();
            // A zero MaxTime is refused, as in C++ (null is "none").
            bool refused = false;
            try { ex.Step(new StepBudget { MaxTime = TimeSpan.Zero }); }
            catch (ArgumentOutOfRangeException e) { refused = e.Message.Contains("must be > 0"); }
            Check.True(refused, "MaxTime zero refused");
            Check.True(c.Error == null, "no step error");

            // Use after Dispose: the SafeHandle refuses it before weft sees it.
            var d = ex.CreateConversation();
            d.Dispose();
            Check.Throws<ObjectDisposedException>(() => { var n = d.TokenCount; }, "use after Dispose");

            // The executor goes first: its conversations say Disposed, a
            // generation stays readable (cancelled).
            c.Prompt("Hello", addBos: true);
            var g = c.Generate(new GenerateParams { MaxTokens = 50 });
            ex.Step();
            ex.Dispose();
            Check.Throws(Status.Disposed, "executor was destroyed", () => c.Prompt("more"), "prompt after executor disposed");
            Check.True(c.IsDisposed, "conversation disposed with its executor");
            Check.True(g.Wait(TimeSpan.FromSeconds(1)), "generation done");
            Check.Equal(FinishReason.Cancelled, g.Reason, "generation cancelled with its executor");
            Check.True(g.TokenCount <= 2, "at most the tokens of one step");
            g.Dispose();
            c.Dispose();
        }

        // PressurePolicy.Callback: the callback gets a borrowed conversation
        // and disposes another to make room.
        private static void Pressure(Model model)
        {
            Conversation victim = null;
            ulong seenId = 0;
            int calls = 0, needed = 0, free = 0;
            var p = Small(256, 4);
            p.BatchSize = 256;
            p.SpillRamBytes = 0;  // no parking: the pressure policy applies
            p.SpillRecompute = false;
            p.PrefixCacheCells = 0;  // small's prompt begins big's: shared, it would need no room
            p.Pressure = PressurePolicy.Callback;
            p.OnPressure = info =>
            {
                ++calls;
                seenId = info.Conversation.Id;
                needed = info.NeededCells;
                free = info.FreeCells;
                victim.Dispose();
            };
            using (var ex = new Executor(model, p))
            using (var big = ex.CreateConversation())
            using (var small = ex.CreateConversation())
            {
                victim = big;
                var tokens = new int[200];
                for (int i = 0; i < tokens.Length; ++i) tokens[i] = 100 + i;
                big.Prompt(tokens);
                while (!ex.Step().Idle) { }
                small.Prompt(new ArraySegment<int>(tokens, 0, 100).ToArrayCopy());
                while (!ex.Step().Idle) { }
                Check.Equal(1, calls, "pressure callback calls");
                Check.Equal(small.Id, seenId, "the conversation that needed room");
                Check.Equal(100, needed, "cells needed");
                Check.Equal(56, free, "cells free");
                Check.Equal(100, small.DecodedCount, "decoded after the callback made room");
            }
        }

        // Eight threads tokenize and prompt at once while a ninth steps.
        private static void ManyThreads(Model model)
        {
            using (var ex = new Executor(model, Small(2048, 16)))
            {
                var errors = new List<string>();
                var stop = false;
                var stepper = new Thread(() =>
                {
                    try { while (!Volatile.Read(ref stop)) if (ex.Step().Idle) Thread.Sleep(1); }
                    catch (Exception e) { lock (errors) errors.Add(e.ToString()); }
                });
                stepper.Start();
                var threads = new List<Thread>();
                for (int t = 0; t < 8; ++t)
                {
                    int id = t;
                    var th = new Thread(() =>
                    {
                        try
                        {
                            var text = "Thread " + id + " says hello";
                            var tokens = model.Tokenize(text, addBos: true);
                            using (var c = ex.CreateConversation())
                            {
                                c.Prompt(tokens);
                                var deadline = DateTime.UtcNow.AddSeconds(60);
                                while (!c.HasLogits && DateTime.UtcNow < deadline) Thread.Sleep(1);
                                if (!c.HasLogits || c.DecodedCount != tokens.Length)
                                    lock (errors) errors.Add("thread " + id + ": not decoded");
                                if (!model.Detokenize(tokens, removeSpecial: true).Contains(text))
                                    lock (errors) errors.Add("thread " + id + ": round trip");
                            }
                        }
                        catch (Exception e) { lock (errors) errors.Add(e.ToString()); }
                    });
                    threads.Add(th);
                    th.Start();
                }
                foreach (var th in threads) th.Join();
                Volatile.Write(ref stop, true);
                stepper.Join();
                Check.True(errors.Count == 0, "threads: " + string.Join("; ", errors));
                Check.Equal(0, ex.Stats.Conversations, "every thread's conversation disposed");
            }
        }

        private static int[] ToArrayCopy(this ArraySegment<int> s)
        {
            var a = new int[s.Count];
            Array.Copy(s.Array, s.Offset, a, 0, s.Count);
            return a;
        }
    }
}
