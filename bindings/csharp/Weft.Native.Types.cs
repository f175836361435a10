// Weft.Native.Types.cs — the P/Invoke layer's types: SafeHandle types for
// weft's handles, blittable struct mirrors and the callback signatures.
// Part of the P/Invoke layer (Weft.Native.cs).
//
// Every struct here mirrors one in include/weft/c/*.h field for field (same
// order, same widths; size_t = UIntPtr, pointers = IntPtr, weft_bool = int).
// Each carries its own size in struct_size, so a mismatch is refused by the
// library with Status.StructSize rather than misread.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
#if !UNITY_5_3_OR_NEWER
    // IL2CPP and Mono's full-AOT look for this attribute by name on static
    // methods handed to native code; Unity provides AOT.MonoPInvokeCallback.
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type delegateType) { DelegateType = delegateType; }
        public Type DelegateType { get; private set; }
    }
#endif

    // --- Handles: freed by the matching weft_*_free exactly once -------------

    internal abstract class WeftHandle : SafeHandle
    {
        protected WeftHandle() : base(IntPtr.Zero, true) { }
        protected WeftHandle(IntPtr existing, bool owns) : base(IntPtr.Zero, owns) { SetHandle(existing); }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
    }

    internal sealed class ModelHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_model_free(handle) == Status.Ok; }
    }

    internal sealed class ExecutorHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_executor_free(handle) == Status.Ok; }
    }

    internal sealed class ConversationHandle : WeftHandle
    {
        public ConversationHandle() { }
        // A borrowed handle (a pressure callback's): never freed by us.
        public ConversationHandle(IntPtr borrowed) : base(borrowed, false) { }
        protected override bool ReleaseHandle() { return Native.weft_conversation_free(handle) == Status.Ok; }
    }

    internal sealed class GenerationHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_generation_free(handle) == Status.Ok; }
    }

    internal sealed class EventListHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_event_list_free(handle) == Status.Ok; }
    }

    internal sealed class BytesHandle : WeftHandle
    {
        public BytesHandle() { }
        // One weft handed over (a save_async callback's): ours to free.
        public BytesHandle(IntPtr owned) : base(owned, true) { }
        protected override bool ReleaseHandle() { return Native.weft_bytes_free(handle) == Status.Ok; }
    }

    internal sealed class ConversationListHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_conversation_list_free(handle) == Status.Ok; }
    }

    internal sealed class AdapterHandle : WeftHandle
    {
        public AdapterHandle() { }
        // One weft handed over (weft_conversation_adapters' elements): ours to free.
        public AdapterHandle(IntPtr owned) : base(owned, true) { }
        protected override bool ReleaseHandle() { return Native.weft_adapter_free(handle) == Status.Ok; }
    }

    internal sealed class ProjectorHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_projector_free(handle) == Status.Ok; }
    }

    internal sealed class PreparedImageHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_prepared_image_free(handle) == Status.Ok; }
    }

    internal sealed class EmbeddingHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_embedding_free(handle) == Status.Ok; }
    }

    internal sealed class MemoryHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_memory_free(handle) == Status.Ok; }
    }

    internal sealed class MemoryHitsHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_memory_hits_free(handle) == Status.Ok; }
    }

    internal sealed class MemorySearchHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_memory_search_free(handle) == Status.Ok; }
    }

    // --- Struct mirrors ------------------------------------------------------

    [StructLayout(LayoutKind.Sequential)]
    internal struct CompactParamsNative
    {
        public UIntPtr struct_size;
        public uint keep_first, keep_last;
        public IntPtr summary;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ProjectorParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr path;
        public int n_threads, use_gpu;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ImageSpanNative
    {
        public UIntPtr struct_size;
        public ulong id;
        public uint begin, n_tokens, n_pos;
        public int encoded;
        public int audio;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ModelParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr path;
        public IntPtr on_progress;
        public IntPtr progress_user_data;
        public int n_gpu_layers;
        public int use_mmap;
        public int vocab_only;
        public IntPtr rpc;
        public int rpc_timeout_ms;
        public long rpc_reply_timeout_ms;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ModelInfoNative
    {
        public UIntPtr struct_size;
        public ulong n_params, size_bytes, fingerprint;
        public int n_vocab, n_ctx_train, n_embd, n_layer, bos, eos;
        public int memory, sliding_window;
        public int tool_format;  // appended after sliding_window
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ExecutorParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr on_pressure, pressure_user_data, pressure_user_data_free;
        public IntPtr spill_disk_dir;
        public ulong spill_ram_bytes, spill_disk_bytes;
        public UIntPtr events_capacity;
        public uint n_ctx, n_batch, n_ubatch, n_seq_max;
        public int n_threads, kv_type, flash_attn, pressure;
        public uint max_prompt_chunk;
        public int events, spill_recompute;
        public long prefix_cache_cells;
        public IntPtr projector;
        public int image_encoding;
        public IntPtr tuning_cache_dir;
        public int embedder, embed_pooling;  // appended after tuning_cache_dir
        public IntPtr embedding_model;
        public uint embed_n_ctx, embed_n_seq_max;
        public int embed_normalize;
        public IntPtr speculative;  // weft_speculative_params*, appended after embed_normalize
        public IntPtr draft_model;  // weft_draft_model_params*, appended after speculative
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct StepBudgetNative
    {
        public UIntPtr struct_size;
        public long max_time_us, deadline_us;
        public uint max_tokens;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct StepResultNative
    {
        public UIntPtr struct_size;
        public double seconds, decode_seconds;
        public uint tokens_decoded, conversations, tokens_sampled, decode_calls, failed, blocked;
        public int idle, deadline_hit;
        public uint tokens_embedded, texts_embedded;  // appended after deadline_hit
        public uint tokens_drafted, drafts_accepted;  // appended after texts_embedded
        public double draft_seconds;                  // appended after drafts_accepted
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ExecutorStatsNative
    {
        public UIntPtr struct_size;
        public ulong queued_tokens, steps, tokens_decoded, tokens_sampled, decode_failures, deadline_stops,
            events_dropped, cost_model_samples, ram_bytes, disk_bytes, parks, restores, recomputes;
        public double step_ms_p50, step_ms_p99, decode_ms_p50, predicted_ms_per_token, park_ms, restore_ms;
        public uint n_ctx, cells_used, cells_free, n_seq_max, slots_used, conversations, generating,
            resident, parked_ram, parked_disk, parked_recompute;
        public int worker_running;
        public ulong prefix_tokens_reused, prefix_hits, prefix_cache_hits, prefix_misses, prefix_evictions, cells_saved;
        public uint prefix_cache_cells, pinned_prefixes;
        public ulong adapter_switches;
        public double adapter_switch_ms;
        public ulong images_encoded;
        public double image_encode_ms;
        public ulong image_batches;
        public double image_decode_ms;
        public uint images_pending;
        public double flash_attn_probe_ms, plain_attn_probe_ms;
        public int flash_attn, flash_attn_source;
        public uint attn_probe_seqs, attn_probe_depth;
        public ulong redecodes, redecode_tokens;
        public ulong texts_embedded, embed_tokens, embed_decodes;  // appended after redecode_tokens
        public double embed_ms;
        public uint embed_pending;
        public ulong tokens_drafted, drafts_accepted;  // appended after embed_pending
        public ulong draft_model_tokens;               // appended after drafts_accepted
        public double draft_model_seconds;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct EncodeResultNative
    {
        public UIntPtr struct_size;
        public uint images, failed, pending;
        public double seconds;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct WorkerParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr budget;
        public uint idle_wait_ms;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct EventNative
    {
        public UIntPtr struct_size;
        public ulong conversation;
        public IntPtr text;
        public UIntPtr text_len;
        public IntPtr error_message;
        public int kind, token, reason, error_code;
        public IntPtr tool_name;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct SamplerParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr grammar, grammar_root;
        public float temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
        public int top_k, penalty_last_n;
        public uint seed;
        public IntPtr json_schema;  // appended in the C struct
        public IntPtr logit_bias;   // appended after json_schema: weft_logit_bias[n_logit_bias]
        public UIntPtr n_logit_bias;
        // Appended after n_logit_bias.
        public float typical_p, xtc_probability, xtc_threshold, dry_multiplier, dry_base;
        public int dry_allowed_length, dry_penalty_last_n;
        public IntPtr dry_sequence_breakers;  // const char *const[n]; zero = the defaults
        public UIntPtr n_dry_sequence_breakers;
        public int mirostat;
        public float mirostat_tau, mirostat_eta;
        public IntPtr banned_strings;  // const char *const[n]
        public UIntPtr n_banned_strings;
    }

    // weft_token_logprob.
    [StructLayout(LayoutKind.Sequential)]
    internal struct TokenLogprobNative
    {
        public int token;
        public float logprob;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct GenerateParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr sampler, stop;
        public UIntPtr n_stop;
        public IntPtr on_token, user_data, user_data_free;
        public uint max_tokens;
        public int ignore_eos;
        public IntPtr on_finish;
        public int logprobs;  // appended after on_finish
        public uint top_logprobs;
        public IntPtr tools;  // weft_tool[n_tools], appended after top_logprobs
        public UIntPtr n_tools;
        public int tool_choice;
        public int tool_format;  // appended after tool_choice
        public IntPtr speculative;  // weft_speculative_params*, appended after tool_format
    }

    // weft_tool.
    [StructLayout(LayoutKind.Sequential)]
    internal struct ToolNative
    {
        public IntPtr name, description, parameters;
    }

    // An element of weft_conversation_set_adapters' array: each carries its size.
    [StructLayout(LayoutKind.Sequential)]
    internal struct AdapterUseNative
    {
        public UIntPtr struct_size;
        public IntPtr adapter;
        public float scale;
        public int layer_start, layer_end;
    }

    // --- Callback signatures (cdecl, user_data last) -------------------------

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void FreeFn(IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void LogFn(int level, IntPtr line, UIntPtr len, IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate int ProgressFn(float progress, IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void PressureFn(IntPtr conversation, uint neededCells, uint freeCells, IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void TokenFn(int token, IntPtr text, UIntPtr len, IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void FinishFn(int reason, IntPtr userData);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    internal delegate void SaveFn(Status status, IntPtr bytes, IntPtr message, IntPtr userData);
}
