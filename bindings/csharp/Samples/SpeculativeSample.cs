// An NPC's reply drafted from its own words: with a lookup drafter the
// executor verifies several tokens of a conversation in one decode. Checked:
// a greedy reply with drafts (per generation, and as the executor's default)
// has the same tokens as without and reports drafts; the steps and the stats
// count the same drafts; Drafter.None opts a generation out; bad values are
// a WeftException naming the field and value. Then the model drafts for
// itself (Drafter.Model, ExecutorParams.DraftModel): the same tokens, nearly
// every draft kept, the draft model's tokens and seconds counted.
using System;
using System.Collections.Generic;
using Weft;

namespace Weft.Samples
{
    internal static class SpeculativeSample
    {
        // Greedy over a few tokens far above the rest: the reply repeats
        // itself, so lookup has something to copy (the model still chooses).
        private static SamplerParams SmallAlphabet()
        {
            var bias = new Dictionary<int, float>();
            for (int t = 300; t < 305; ++t) bias[t] = 30f;
            return new SamplerParams { LogitBias = bias };
        }

        private static ExecutorParams NewParams(SpeculativeParams spec)
        {
            return new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 4, Threads = 2, Speculative = spec };
        }

        private static int[] Reply(Executor ex, SpeculativeParams spec, out int drafted, out int accepted, out long stepDrafted)
        {
            double draftSeconds;
            return Reply(ex, spec, out drafted, out accepted, out stepDrafted, out draftSeconds);
        }

        private static int[] Reply(Executor ex, SpeculativeParams spec, out int drafted, out int accepted, out long stepDrafted,
                                   out double draftSeconds)
        {
            using (var c = ex.CreateConversation())
            {
                c.Prompt("Once upon a time there was a time", addBos: true);
                using (var g = c.Generate(new GenerateParams
                       { MaxTokens = 40, IgnoreEos = true, Sampler = SmallAlphabet(), Speculative = spec }))
                {
                    stepDrafted = 0;
                    draftSeconds = 0;
                    for (int i = 0; i < 10000; ++i)
                    {
                        var r = ex.Step();
                        Check.True(r.DraftsAccepted <= r.TokensDrafted && r.TokensDrafted <= r.TokensDecoded, "step's draft counts");
                        stepDrafted += r.TokensDrafted;
                        draftSeconds += r.DraftSeconds;
                        if (r.Idle) break;
                    }
                    drafted = g.Drafted;
                    accepted = g.Accepted;
                    return g.Tokens;
                }
            }
        }

        public static void Run(string modelPath)
        {
            Check.Equal("lookup", SpeculativeParams.DrafterName(Drafter.Lookup), "drafter name");
            Check.Equal("none", SpeculativeParams.DrafterName(Drafter.None), "drafter name");
            var defaults = new SpeculativeParams();
            Check.True(defaults.Drafter == Drafter.None && defaults.MaxDraft == 8 && defaults.NgramMax == 3 &&
                       defaults.NgramMin == 2 && defaults.Adaptive, "defaults");
            // Every draft the budgets allow: on a CPU the cost model often declines them.
            var lookup = new SpeculativeParams { Drafter = Drafter.Lookup, NgramMin = 1, Adaptive = false };
            int drafted, accepted;
            long stepDrafted;
            using (var model = Model.Load(modelPath))
            {
                using (var ex = new Executor(model, NewParams(null)))
                {
                    var plain = Reply(ex, null, out drafted, out accepted, out stepDrafted);
                    Check.Equal(40, plain.Length, "reply length");
                    Check.True(drafted == 0 && stepDrafted == 0, "no drafts without a drafter");
                    var spec = Reply(ex, lookup, out drafted, out accepted, out stepDrafted);
                    Check.SameTokens(plain, spec, "with drafts: the same tokens");
                    Check.True(drafted > 0 && accepted > 0 && accepted <= drafted, "drafted " + drafted + ", accepted " + accepted);
                    Check.Equal((long)drafted, stepDrafted, "the steps' drafts");
                    var st = ex.Stats;
                    Check.Equal((long)drafted, st.TokensDrafted, "stats: drafted");
                    Check.Equal((long)accepted, st.DraftsAccepted, "stats: accepted");
                    Console.WriteLine("  lookup: " + drafted + " drafted, " + accepted + " accepted of " + spec.Length + " tokens");

                    using (var c = ex.CreateConversation())
                    {
                        c.Prompt("Once", addBos: true);
                        Check.Throws(Status.OutOfRange, "speculative.max_draft = 0 is outside [1, 32]",
                                     () => c.Generate(new GenerateParams { Speculative = new SpeculativeParams { MaxDraft = 0 } }).Dispose(),
                                     "max_draft 0");
                        Check.Throws(Status.OutOfRange, "ngram_min = 4 and ngram_max = 3",
                                     () => c.Generate(new GenerateParams { Speculative = new SpeculativeParams { NgramMin = 4 } }).Dispose(),
                                     "ngram_min > ngram_max");
                        Check.Throws(Status.InvalidArgument, "drafter = 9 is not a weft_drafter",
                                     () => c.Generate(new GenerateParams { Speculative = new SpeculativeParams { Drafter = (Drafter)9 } }).Dispose(),
                                     "unknown drafter");
                    }
                }
                using (var ex = new Executor(model, NewParams(lookup)))
                {
                    var plain = Reply(ex, new SpeculativeParams(), out drafted, out accepted, out stepDrafted);
                    Check.True(drafted == 0 && stepDrafted == 0, "Drafter.None opts out of the executor's drafter");
                    var spec = Reply(ex, null, out drafted, out accepted, out stepDrafted);
                    Check.SameTokens(plain, spec, "the executor's drafter: the same tokens");
                    Check.True(drafted > 0, "the executor's drafter drafts");
                }
                Check.Throws(Status.OutOfRange, "weft_executor_params.speculative.max_draft = 33",
                             () => new Executor(model, NewParams(new SpeculativeParams { Drafter = Drafter.Lookup, MaxDraft = 33 })).Dispose(),
                             "executor max_draft 33");
                RunDraftModel(modelPath, model);
            }
        }

        // The model as its own draft model: it drafts what it will sample (it
        // picks with the generation's logit biases too), so nearly every draft
        // is kept.
        private static void RunDraftModel(string modelPath, Model model)
        {
            Check.Equal("model", SpeculativeParams.DrafterName(Drafter.Model), "drafter name");
            var d = new DraftModelParams();
            Check.True(d.Model == null && d.ContextSize == 4096 && d.MaxSequences == 16 && d.PMin == 0.5f, "draft model defaults");
            var byModel = new SpeculativeParams { Drafter = Drafter.Model, MaxDraft = 4, Adaptive = false };
            int drafted, accepted;
            long stepDrafted;
            double draftSeconds;
            int[] plain;
            using (var ex = new Executor(model, NewParams(null)))
            {
                plain = Reply(ex, null, out drafted, out accepted, out stepDrafted);
                using (var c = ex.CreateConversation())
                {
                    c.Prompt("Once", addBos: true);
                    Check.Throws(Status.InvalidArgument, "needs ExecutorParams::draft_model",
                                 () => c.Generate(new GenerateParams { Speculative = byModel }).Dispose(), "no draft model");
                }
            }
            var p = NewParams(byModel);
            // A handle of its own, disposed once the executor holds the model.
            var draft = Model.Load(modelPath);
            p.DraftModel = new DraftModelParams { Model = draft, ContextSize = 512, MaxSequences = 2, PMin = 0f };
            using (var ex = new Executor(model, p))
            {
                draft.Dispose();
                var spec = Reply(ex, null, out drafted, out accepted, out stepDrafted, out draftSeconds);
                Check.SameTokens(plain, spec, "the draft model: the same tokens");
                Check.True(drafted > 0 && accepted * 2 > drafted && accepted <= drafted,
                           "the draft model: drafted " + drafted + ", accepted " + accepted);
                Check.Equal((long)drafted, stepDrafted, "the steps' drafts");
                var st = ex.Stats;
                Check.True(st.DraftModelTokens > 0 && st.DraftModelSeconds > 0, "stats: the draft model's work");
                Check.True(draftSeconds > 0 && Math.Abs(st.DraftModelSeconds - draftSeconds) < 1e-9, "the steps' draft seconds");
                Console.WriteLine("  model: " + drafted + " drafted, " + accepted + " accepted of " + spec.Length + " tokens; " +
                                  st.DraftModelTokens + " draft-model tokens in " + (st.DraftModelSeconds * 1e3).ToString("F1") + " ms");
            }
            Check.Throws(Status.InvalidArgument, "needs ExecutorParams::draft_model",
                         () => new Executor(model, NewParams(byModel)).Dispose(), "executor drafter model without a draft model");
            p.DraftModel = new DraftModelParams { Model = model, MaxSequences = 0 };
            Check.Throws(Status.OutOfRange, "weft_executor_params.draft_model.n_seq_max = 0 is outside [1, 256]",
                         () => new Executor(model, p).Dispose(), "draft model n_seq_max 0");
            p.DraftModel = new DraftModelParams { Model = model, PMin = 2f };
            Check.Throws(Status.OutOfRange, "draft_model.p_min = 2 is outside [0, 1]",
                         () => new Executor(model, p).Dispose(), "draft model p_min 2");
            p.DraftModel = new DraftModelParams();
            try
            {
                new Executor(model, p).Dispose();
                Check.True(false, "a draft model without a Model");
            }
            catch (ArgumentNullException) { }
        }
    }
}
