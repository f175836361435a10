// Weft.Speculative.cs — speculative decoding (include/weft/c/speculative.h):
// a generation drafts the tokens it expects next and the step verifies them
// in its own decode; the tokens are those the model samples without drafts.
// Set per generation (GenerateParams.Speculative) or as the executor's
// default (ExecutorParams.Speculative); Drafter.Model drafts with the
// executor's ExecutorParams.DraftModel. Generation.Drafted/Accepted,
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
        Model = 2,   // a second, smaller model with the same vocabulary (ExecutorParams.DraftModel), greedily
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

        // "none", "lookup", "model" (weft_drafter_name).
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

    // ExecutorParams.DraftModel: the second model behind Drafter.Model. The
    // executor makes a llama.cpp context of it, freed with the executor.
    public sealed class DraftModelParams
    {
        // The draft model, with the executor model's vocabulary token for
        // token and plain attention (else WeftException InvalidArgument); the
        // executor keeps its own reference, so it may be disposed once the
        // executor exists. Required (null throws ArgumentNullException).
        public Model Model;
        // Cells of the draft context, shared by the drafting conversations,
        // in [64, the draft model's n_ctx_train * MaxSequences]. Default 4096.
        public int ContextSize;
        // Conversations whose tokens the draft context keeps at once,
        // [1, 256]; more take turns. Default 16.
        public int MaxSequences;
        // A draft ends before a token the draft model gives less than this
        // probability, [0, 1]; 0 drafts MaxDraft tokens whatever the
        // confidence. Default 0.5.
        public float PMin;

        public DraftModelParams()
        {
            var n = Defaults();
            ContextSize = (int)n.n_ctx;
            MaxSequences = (int)n.n_seq_max;
            PMin = n.p_min;
        }

        private static DraftModelParamsNative Defaults()
        {
            var n = new DraftModelParamsNative();
            Native.Check(Native.weft_draft_model_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(DraftModelParamsNative)))));
            return n;
        }

        // Into native params; the Model's handle is AddRef'ed (`added`) until
        // the create call returns. Out-of-range values are refused by the
        // library (WeftException OutOfRange naming the field and value); a
        // negative one becomes a value it refuses too.
        internal void Check()
        {
            if (Model == null) throw new ArgumentNullException("Model", "DraftModelParams.Model is required");
        }

        internal DraftModelParamsNative ToNative(ref bool added)
        {
            Check();
            var n = Defaults();
            n.n_ctx = (uint)Math.Max(0, ContextSize);
            n.n_seq_max = (uint)Math.Max(0, MaxSequences);
            n.p_min = PMin;
            Model.Handle.DangerousAddRef(ref added);
            n.model = Model.Handle.DangerousGetHandle();
            return n;
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct DraftModelParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr model;
        public uint n_ctx, n_seq_max;
        public float p_min;
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
