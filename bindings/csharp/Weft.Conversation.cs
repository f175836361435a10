// Weft.Conversation.cs — Conversation: one dialogue, its sampler and
// generation parameters (include/weft/c/conversation.h, generation.h).
// Saving and parking: Weft.State.cs. Part of the binding; the rules are in
// Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    public sealed class SamplerParams
    {
        public float Temperature, TopP, MinP, RepeatPenalty, FrequencyPenalty, PresencePenalty;
        public int TopK, PenaltyLastN;
        public uint Seed;
        public string Grammar;      // GBNF; null = none
        public string GrammarRoot;  // null = "root"
        // A JSON Schema (its JSON text): sample only JSON that matches it;
        // null = none. Not together with Grammar (WeftException
        // InvalidArgument, as is a schema that does not convert).
        public string JsonSchema;
        // Token id -> bias added to its logit before any other sampling
        // step; float.NegativeInfinity bans the token. null or empty = none.
        // At most 1024 entries; a NaN or +inf bias is WeftException
        // InvalidArgument, a token outside the vocabulary OutOfRange.
        public System.Collections.Generic.IDictionary<int, float> LogitBias;
        // typical_p, XTC, DRY and Mirostat 2.0 (SamplerParams in
        // include/weft/sampling.hpp says what each does; defaults: off).
        public float TypicalP, XtcProbability, XtcThreshold, DryMultiplier, DryBase;
        public int DryAllowedLength, DryPenaltyLastN;
        // null = the defaults ("\n", ":", "\"", "*"); an empty array = none.
        public string[] DrySequenceBreakers;
        public int Mirostat;  // 0 = off, 2 = Mirostat 2.0
        public float MirostatTau, MirostatEta;
        // Text a generation never writes: a token that would complete one of
        // these (after the generation's text so far) is never drawn. null or
        // empty = none; at most 256, each 1-256 bytes (else WeftException
        // InvalidArgument).
        public string[] BannedStrings;

        public SamplerParams()
        {
            var n = new SamplerParamsNative();
            Native.Check(Native.weft_sampler_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(SamplerParamsNative)))));
            Temperature = n.temperature;
            TopP = n.top_p;
            MinP = n.min_p;
            RepeatPenalty = n.repeat_penalty;
            FrequencyPenalty = n.frequency_penalty;
            PresencePenalty = n.presence_penalty;
            TopK = n.top_k;
            PenaltyLastN = n.penalty_last_n;
            Seed = n.seed;
            TypicalP = n.typical_p;
            XtcProbability = n.xtc_probability;
            XtcThreshold = n.xtc_threshold;
            DryMultiplier = n.dry_multiplier;
            DryBase = n.dry_base;
            DryAllowedLength = n.dry_allowed_length;
            DryPenaltyLastN = n.dry_penalty_last_n;
            Mirostat = n.mirostat;
            MirostatTau = n.mirostat_tau;
            MirostatEta = n.mirostat_eta;
        }

        internal SamplerParamsNative ToNative(CallMemory mem)
        {
            var n = new SamplerParamsNative();
            Native.Check(Native.weft_sampler_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(SamplerParamsNative)))));
            n.temperature = Temperature;
            n.top_p = TopP;
            n.min_p = MinP;
            n.repeat_penalty = RepeatPenalty;
            n.frequency_penalty = FrequencyPenalty;
            n.presence_penalty = PresencePenalty;
            n.top_k = TopK;
            n.penalty_last_n = PenaltyLastN;
            n.seed = Seed;
            n.grammar = mem.Utf8z(Grammar);
            n.grammar_root = mem.Utf8z(GrammarRoot);
            n.json_schema = mem.Utf8z(JsonSchema);
            if (LogitBias != null && LogitBias.Count > 0)
            {
                // weft_logit_bias: int32 token, float bias.
                var b = new byte[8 * LogitBias.Count];
                int at = 0;
                foreach (var kv in LogitBias)
                {
                    BitConverter.GetBytes(kv.Key).CopyTo(b, at);
                    BitConverter.GetBytes(kv.Value).CopyTo(b, at + 4);
                    at += 8;
                }
                n.logit_bias = mem.Bytes(b);
                n.n_logit_bias = new UIntPtr((uint)LogitBias.Count);
            }
            n.typical_p = TypicalP;
            n.xtc_probability = XtcProbability;
            n.xtc_threshold = XtcThreshold;
            n.dry_multiplier = DryMultiplier;
            n.dry_base = DryBase;
            n.dry_allowed_length = DryAllowedLength;
            n.dry_penalty_last_n = DryPenaltyLastN;
            if (DrySequenceBreakers != null)
            {
                n.dry_sequence_breakers = Strings(DrySequenceBreakers, "DrySequenceBreakers", mem);
                n.n_dry_sequence_breakers = Native.Size(DrySequenceBreakers.Length);
            }
            if (BannedStrings != null && BannedStrings.Length > 0)
            {
                n.banned_strings = Strings(BannedStrings, "BannedStrings", mem);
                n.n_banned_strings = Native.Size(BannedStrings.Length);
            }
            n.mirostat = Mirostat;
            n.mirostat_tau = MirostatTau;
            n.mirostat_eta = MirostatEta;
            return n;
        }

        // A const char *const[] of `strings` (non-null even when empty).
        static IntPtr Strings(string[] strings, string name, CallMemory mem)
        {
            var ptrs = new IntPtr[Math.Max(1, strings.Length)];
            for (int i = 0; i < strings.Length; ++i)
            {
                if (strings[i] == null) throw new ArgumentNullException(name + "[" + i + "]");
                ptrs[i] = mem.Utf8z(strings[i]);
            }
            return mem.PointerArray(ptrs);
        }
    }

    // How a model writes a call (weft::ToolFormat; include/weft/tools.hpp).
    public enum ToolFormat
    {
        Automatic = 0,  // GenerateParams: the model's (ModelInfo.ToolFormat); elsewhere Hermes
        Hermes = 1,     // <tool_call>{"name", "arguments"}</tool_call>: Qwen, Hermes; weft's own
        Llama3 = 2,     // {"name", "parameters"}: Llama 3.1-3.3
        Mistral = 3,    // [TOOL_CALLS][{"name", "arguments"}]
    }

    public enum ToolChoice
    {
        Automatic = 0,  // one call, or plain text that does not begin with '<'
        Required = 1,   // one call
    }

    // An action a generation may take: Name (1-64 of [A-Za-z0-9_-]), a
    // Description for the model, Parameters a JSON Schema text of the
    // arguments object (null = any object).
    public sealed class Tool
    {
        public string Name, Description, Parameters;

        // The system-prompt paragraph that lists the tools and the call
        // format (weft::tools_prompt); WeftException InvalidArgument for bad tools.
        public static string Prompt(Tool[] tools, ToolFormat format = ToolFormat.Hermes)
        {
            if (tools == null) throw new ArgumentNullException("tools");
            using (var mem = new CallMemory())
            {
                var arr = ToNative(tools, mem);
                return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_tools_prompt_format(arr, Native.Size(tools.Length), (int)format, buf, cap, out len));
            }
        }

        // The result of a call, to prompt back, as the format's templates
        // write it (weft::tool_result_prompt).
        public static string ResultPrompt(string result, ToolFormat format = ToolFormat.Hermes)
        {
            if (result == null) throw new ArgumentNullException("result");
            var bytes = Native.Utf8z(result);
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_tool_result_prompt(bytes, (int)format, buf, cap, out len));
        }

        internal static IntPtr ToNative(Tool[] tools, CallMemory mem)
        {
            var size = Marshal.SizeOf(typeof(ToolNative));
            var bytes = new byte[size * tools.Length];
            var one = Marshal.AllocHGlobal(size);
            try
            {
                for (int i = 0; i < tools.Length; ++i)
                {
                    if (tools[i] == null || tools[i].Name == null) throw new ArgumentNullException("Tools[" + i + "].Name");
                    var t = new ToolNative { name = mem.Utf8z(tools[i].Name), description = mem.Utf8z(tools[i].Description),
                                             parameters = mem.Utf8z(tools[i].Parameters) };
                    Marshal.StructureToPtr(t, one, false);
                    Marshal.Copy(one, bytes, i * size, size);
                }
            }
            finally
            {
                Marshal.FreeHGlobal(one);
            }
            return mem.Bytes(bytes);
        }
    }

    public sealed class GenerateParams
    {
        public int MaxTokens = 128;
        // null = the conversation's own sampler (whose state then advances).
        public SamplerParams Sampler;
        public string[] Stop;
        // Every sampled token and the text that became final with it, on the
        // stepping thread (see Generation.Wait for when the last one has run).
        public Action<int, string> OnToken;
        // Never sample an end-of-generation token: the generation ends at
        // MaxTokens, a stop string, a full context or Cancel().
        public bool IgnoreEos;
        // Record each sampled token's log-probability under the model's
        // logits (Generation.Logprob), and this many most likely tokens
        // beside it (0-20; needs Logprobs).
        public bool Logprobs;
        public int TopLogprobs;
        public const int MaxTopLogprobs = 20;
        // Actions the reply may take (include/weft/tools.hpp): a call in
        // ToolFormat (Automatic: the model's), or with ToolChoice.Automatic
        // plain text; the call comes back as Generation.ToolCall. null or
        // empty = none.
        public Tool[] Tools;
        public ToolChoice ToolChoice = ToolChoice.Automatic;
        public ToolFormat ToolFormat = ToolFormat.Automatic;
        // Speculative decoding for this generation (Weft.Speculative.cs);
        // null = the executor's (ExecutorParams.Speculative). Drafter.None
        // opts out of the executor's.
        public SpeculativeParams Speculative;
        // Once, when the generation ends, with its reason: on the stepping
        // thread after its last OnToken (at the end of that step, or of the
        // next one when Cancel, a rewind or a dispose on another thread ended
        // it). Must not call Step.
        public Action<FinishReason> OnFinish;
    }

    // One dialogue: history in the shared KV cache, queued input, logits, a
    // sampler and at most one running generation.
    public sealed partial class Conversation : IDisposable
    {
        internal readonly ConversationHandle Handle;

        internal Conversation(ConversationHandle handle) { Handle = handle; }

        public ulong Id
        {
            get { ulong id; Native.Check(Native.weft_conversation_id(Handle, out id)); return id; }
        }

        // Queues text (decoded by later steps, in chunks); never waits.
        public void Prompt(string text, bool addBos = false, bool parseSpecial = false)
        {
            PromptUtf8(Native.Utf8(text), addBos, parseSpecial);
        }

        public void PromptUtf8(byte[] utf8, bool addBos = false, bool parseSpecial = false)
        {
            Native.Check(Native.weft_conversation_prompt_text(Handle, utf8, Native.Size(utf8.Length),
                Model.TextFlags(addBos, parseSpecial)));
        }

        public void Prompt(int[] tokens)
        {
            Native.Check(Native.weft_conversation_prompt_tokens(Handle, tokens, Native.Size(tokens.Length)));
        }

        // Fork, Rewind, Remove and ShiftLeft change the tokens now and never
        // wait for a running step; the KV cache follows at once when nobody
        // else steps, else at the stepper's (the worker's) next boundary.
        //
        // Same history, queue, logits and sampler; shares the decoded prefix.
        public Conversation Fork()
        {
            ConversationHandle h;
            Native.Check(Native.weft_conversation_fork(Handle, out h));
            return new Conversation(h);
        }

        public void Rewind(int n) { Native.Check(Native.weft_conversation_rewind(Handle, Count(n, "n"))); }

        public void Remove(int start, int end)
        {
            Native.Check(Native.weft_conversation_remove(Handle, Count(start, "start"), Count(end, "end")));
        }

        public void ShiftLeft(int keep, int discard)
        {
            Native.Check(Native.weft_conversation_shift_left(Handle, Count(keep, "keep"), Count(discard, "discard")));
        }

        public int TokenCount { get { uint n; Native.Check(Native.weft_conversation_n_tokens(Handle, out n)); return (int)n; } }
        public int DecodedCount { get { uint n; Native.Check(Native.weft_conversation_n_decoded(Handle, out n)); return (int)n; } }
        public int QueuedCount { get { uint n; Native.Check(Native.weft_conversation_n_queued(Handle, out n)); return (int)n; } }
        public int CellCount { get { uint n; Native.Check(Native.weft_conversation_n_cells(Handle, out n)); return (int)n; } }

        // History followed by queued input.
        public int[] Tokens
        {
            get
            {
                return Native.GetArray<int>((int[] buf, UIntPtr cap, out UIntPtr n) =>
                    Native.weft_conversation_tokens(Handle, buf, cap, out n));
            }
        }

        public bool HasLogits
        {
            get { int r; Native.Check(Native.weft_conversation_has_logits(Handle, out r)); return r != 0; }
        }

        public float[] GetLogits()
        {
            return Native.GetArray<float>((float[] buf, UIntPtr cap, out UIntPtr n) =>
                Native.weft_conversation_logits(Handle, buf, cap, out n));
        }

        // Into a caller's buffer of VocabSize floats (no allocation per frame).
        public void GetLogits(float[] destination)
        {
            UIntPtr n;
            Native.Check(Native.weft_conversation_logits(Handle, destination, Native.Size(destination.Length), out n));
        }

        // Samples from the current logits with the conversation's sampler;
        // the token is not queued (Prompt it to keep it).
        public int Sample()
        {
            int t;
            Native.Check(Native.weft_conversation_sample(Handle, out t));
            return t;
        }

        public void SetSampler(SamplerParams p)
        {
            if (p == null) throw new ArgumentNullException("p");
            using (var mem = new CallMemory())
            {
                var n = p.ToNative(mem);
                Native.Check(Native.weft_conversation_set_sampler(Handle, ref n));
            }
        }

        public void SetPriority(int priority) { Native.Check(Native.weft_conversation_set_priority(Handle, priority)); }

        // The error a step hit for this conversation (input is held back
        // until ClearError); null when none.
        public WeftException Error
        {
            get
            {
                Status code = Status.Ok;
                var msg = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_conversation_error(Handle, out code, buf, cap, out len));
                return code == Status.Ok ? null : new WeftException(code, msg);
            }
        }

        public void ClearError() { Native.Check(Native.weft_conversation_clear_error(Handle)); }

        public bool IsDisposed
        {
            get { int r; Native.Check(Native.weft_conversation_is_disposed(Handle, out r)); return r != 0; }
        }

        public Generation Generate(GenerateParams p = null)
        {
            p = p ?? new GenerateParams();
            var n = new GenerateParamsNative();
            Native.Check(Native.weft_generate_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(GenerateParamsNative)))));
            if (p.MaxTokens < 0) throw new ArgumentOutOfRangeException("MaxTokens", p.MaxTokens, "must be >= 1");
            n.max_tokens = (uint)p.MaxTokens;
            n.ignore_eos = p.IgnoreEos ? 1 : 0;
            if (p.TopLogprobs < 0) throw new ArgumentOutOfRangeException("TopLogprobs", p.TopLogprobs, "must be >= 0");
            n.logprobs = p.Logprobs ? 1 : 0;
            n.top_logprobs = (uint)p.TopLogprobs;
            TokenSink sink = null;
            var ud = IntPtr.Zero;
            using (var mem = new CallMemory())
            {
                if (p.Sampler != null) n.sampler = mem.Struct(p.Sampler.ToNative(mem));
                if (p.Tools != null && p.Tools.Length > 0)
                {
                    n.tools = Tool.ToNative(p.Tools, mem);
                    n.n_tools = Native.Size(p.Tools.Length);
                }
                n.tool_choice = (int)p.ToolChoice;
                n.tool_format = (int)p.ToolFormat;
                if (p.Speculative != null) n.speculative = mem.Struct(p.Speculative.ToNative());
                if (p.Stop != null && p.Stop.Length > 0)
                {
                    var ptrs = new IntPtr[p.Stop.Length];
                    for (int i = 0; i < ptrs.Length; ++i)
                    {
                        if (p.Stop[i] == null) throw new ArgumentNullException("Stop[" + i + "]");
                        ptrs[i] = mem.Utf8z(p.Stop[i]);
                    }
                    n.stop = mem.PointerArray(ptrs);
                    n.n_stop = Native.Size(ptrs.Length);
                }
                if (p.OnToken != null || p.OnFinish != null)
                {
                    sink = new TokenSink { OnToken = p.OnToken, OnFinish = p.OnFinish };
                    ud = Trampolines.Pin(sink);
                    if (p.OnToken != null) n.on_token = Trampolines.Token;
                    if (p.OnFinish != null) n.on_finish = Trampolines.Finish;
                    n.user_data = ud;
                    n.user_data_free = Trampolines.Free;  // weft frees the GCHandle after the last call
                }
                GenerationHandle h;
                var status = Native.weft_conversation_generate(Handle, ref n, out h);
                if (status != Status.Ok && ud != IntPtr.Zero) Trampolines.Unpin(ud);
                Native.Check(status);
                return new Generation(h, sink);
            }
        }

        // The running generation, or null (without its callback bookkeeping).
        public Generation CurrentGeneration
        {
            get
            {
                GenerationHandle h;
                Native.Check(Native.weft_conversation_generation(Handle, out h));
                if (h.IsInvalid) return null;
                return new Generation(h, null);
            }
        }

        // Frees the handle, which disposes the conversation in weft (its slot
        // and KV cells). A borrowed one (PressureInfo) is left alone.
        public void Dispose() { Handle.Dispose(); }

        private static uint Count(int n, string name)
        {
            if (n < 0) throw new ArgumentOutOfRangeException(name, n, "must be >= 0");
            return (uint)n;
        }
    }
}
