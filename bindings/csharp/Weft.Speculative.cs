// Weft.Speculative.cs — speculative decoding (include/weft/c/speculative.h):
// a generation drafts the tokens it expects next and the step verifies them
// in its own decode; the tokens are those the model samples without drafts.
// Set per generation (GenerateParams.Speculative) or as the executor's
// default (ExecutorParams.Speculative); Generation.Drafted/Accepted,
// StepResult and ExecutorStats count the drafts. Part of the binding; the
// rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    // Where a generation's drafts come from (weft::Drafter).
    public enum Drafter
    {
        None = 0,    // every token a decode of its own
        Lookup = 1,  // the continuation of the latest earlier match of the conversation's last tokens
    }

    public sealed class SpeculativeParams
    {
        public Drafter Drafter;
        // Most draft tokens one step verifies, 1-32. Default 8.
        public int MaxDraft;
        // Lookup: the longest and shortest run of last tokens searched for,
        // 1 <= NgramMin <= NgramMax <= 8. Default 3 and 2.
        public int NgramMax, NgramMin;
        // Draft only as many tokens as the cost model predicts to raise
        // tokens per second; false: every draft token the budgets allow.
        // Default true.
        public bool Adaptive;

        public SpeculativeParams()
        {
            var n = Defaults();
            Drafter = (Drafter)n.drafter;
            MaxDraft = (int)n.max_draft;
            NgramMax = (int)n.ngram_max;
            NgramMin = (int)n.ngram_min;
            Adaptive = n.adaptive != 0;
        }

        // "none", "lookup" (weft_drafter_name).
        public static string DrafterName(Drafter d) { return Marshal.PtrToStringAnsi(Native.weft_drafter_name((int)d)); }

        private static SpeculativeParamsNative Defaults()
        {
            var n = new SpeculativeParamsNative();
            Native.Check(Native.weft_speculative_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(SpeculativeParamsNative)))));
            return n;
        }

        // Out-of-range values are refused by the library (WeftException
        // OutOfRange or InvalidArgument, naming the field and value); a
        // negative one becomes a value it refuses too.
        internal SpeculativeParamsNative ToNative()
        {
            var n = Defaults();
            n.drafter = (int)Drafter;
            n.max_draft = (uint)Math.Max(0, MaxDraft);
            n.ngram_max = (uint)Math.Max(0, NgramMax);
            n.ngram_min = (uint)Math.Max(0, NgramMin);
            n.adaptive = Adaptive ? 1 : 0;
            return n;
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct SpeculativeParamsNative
    {
        public UIntPtr struct_size;
        public int drafter;
        public uint max_draft, ngram_max, ngram_min;
        public int adaptive;
    }
}
