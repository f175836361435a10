// Weft.Native.cs — the P/Invoke layer over include/weft/weft.h: the extern
// declarations and the UTF-8, buffer and status helpers. Its types (handles,
// struct mirrors, callback signatures) are in Weft.Native.Types.cs, its
// callback trampolines and call-scoped memory in Weft.Native.Callbacks.cs.
// The public API is in Weft.cs and the Weft.*.cs beside it.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Weft
{
    internal static partial class Native
    {
        // Apple's mobile players and WebGL link native code into the player.
#if (UNITY_IOS || UNITY_TVOS || UNITY_VISIONOS || UNITY_WEBGL) && !UNITY_EDITOR
        private const string Lib = "__Internal";  // statically linked into the player
#else
        private const string Lib = "weft";        // libweft.so / weft.dll / libweft.dylib
#endif

        [DllImport(Lib)] public static extern IntPtr weft_status_name(Status status);
        [DllImport(Lib)] public static extern IntPtr weft_last_error();
        [DllImport(Lib)] public static extern IntPtr weft_version();
        [DllImport(Lib)] public static extern IntPtr weft_llama_version();
        [DllImport(Lib)] public static extern Status weft_cpu_variant(out IntPtr variant, out int runtimeDispatch);
        [DllImport(Lib)] public static extern IntPtr weft_finish_reason_name(int reason);
        [DllImport(Lib)] public static extern Status weft_set_log_callback(IntPtr callback, int minLevel, IntPtr userData, IntPtr userDataFree);

        [DllImport(Lib)] public static extern Status weft_model_params_init(ref ModelParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_model_load(ref ModelParamsNative p, out ModelHandle model);
        [DllImport(Lib)] public static extern Status weft_model_free(IntPtr model);
        [DllImport(Lib)] public static extern Status weft_model_get_info(ModelHandle model, ref ModelInfoNative info);
        [DllImport(Lib)] public static extern Status weft_model_n_vocab(ModelHandle model, out int n);
        [DllImport(Lib)] public static extern Status weft_model_tokenize(ModelHandle model, byte[] text, UIntPtr len, uint flags, int[] tokens, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_model_detokenize(ModelHandle model, int[] tokens, UIntPtr n, uint flags, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_model_token_piece(ModelHandle model, int token, uint flags, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_model_is_eog(ModelHandle model, int token, out int eog);
        [DllImport(Lib)] public static extern Status weft_model_description(ModelHandle model, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_model_meta(ModelHandle model, byte[] key, byte[] buf, UIntPtr capacity, out UIntPtr len);

        [DllImport(Lib)] public static extern Status weft_executor_params_init(ref ExecutorParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_executor_create(ModelHandle model, ref ExecutorParamsNative p, out ExecutorHandle executor);
        [DllImport(Lib)] public static extern Status weft_executor_free(IntPtr executor);
        [DllImport(Lib)] public static extern Status weft_step_budget_init(ref StepBudgetNative b, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_executor_step(ExecutorHandle executor, ref StepBudgetNative budget, ref StepResultNative result);
        [DllImport(Lib)] public static extern Status weft_executor_get_stats(ExecutorHandle executor, ref ExecutorStatsNative stats);
        [DllImport(Lib)] public static extern Status weft_executor_encode_images(ExecutorHandle executor, uint maxImages, ref EncodeResultNative result);
        [DllImport(Lib)] public static extern Status weft_executor_cells_free(ExecutorHandle executor, out uint n);
        [DllImport(Lib)] public static extern Status weft_executor_pin_prefix(ExecutorHandle executor, int[] tokens, UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_executor_unpin_prefix(ExecutorHandle executor, int[] tokens, UIntPtr n, out int wasPinned);
        [DllImport(Lib)] public static extern Status weft_worker_params_init(ref WorkerParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_executor_start(ExecutorHandle executor, ref WorkerParamsNative p);
        [DllImport(Lib)] public static extern Status weft_executor_stop(ExecutorHandle executor);
        [DllImport(Lib)] public static extern Status weft_executor_is_running(ExecutorHandle executor, out int running);
        [DllImport(Lib)] public static extern Status weft_executor_poll_events(ExecutorHandle executor, UIntPtr max, out EventListHandle list);
        [DllImport(Lib)] public static extern Status weft_event_list_count(EventListHandle list, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_event_list_get(EventListHandle list, UIntPtr index, ref EventNative ev);
        [DllImport(Lib)] public static extern Status weft_event_list_free(IntPtr list);
        // The same over a raw list pointer: EventPump polls each frame without
        // allocating a SafeHandle object (it frees the list in a finally).
        [DllImport(Lib, EntryPoint = "weft_executor_poll_events")]
        public static extern Status weft_executor_poll_events_raw(ExecutorHandle executor, UIntPtr max, out IntPtr list);
        [DllImport(Lib, EntryPoint = "weft_event_list_count")]
        public static extern Status weft_event_list_count_raw(IntPtr list, out UIntPtr n);
        [DllImport(Lib, EntryPoint = "weft_event_list_get")]
        public static extern Status weft_event_list_get_raw(IntPtr list, UIntPtr index, ref EventNative ev);

        [DllImport(Lib)] public static extern Status weft_conversation_create(ExecutorHandle executor, out ConversationHandle conversation);
        [DllImport(Lib)] public static extern Status weft_conversation_free(IntPtr conversation);
        [DllImport(Lib)] public static extern Status weft_conversation_dispose(ConversationHandle c);
        [DllImport(Lib)] public static extern Status weft_conversation_is_disposed(ConversationHandle c, out int disposed);
        [DllImport(Lib)] public static extern Status weft_conversation_id(ConversationHandle c, out ulong id);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_text(ConversationHandle c, byte[] text, UIntPtr len, uint flags);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_tokens(ConversationHandle c, int[] tokens, UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_fork(ConversationHandle c, out ConversationHandle fork);
        [DllImport(Lib)] public static extern Status weft_conversation_rewind(ConversationHandle c, uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_remove(ConversationHandle c, uint p0, uint p1);
        [DllImport(Lib)] public static extern Status weft_conversation_shift_left(ConversationHandle c, uint keep, uint discard);
        [DllImport(Lib)] public static extern Status weft_conversation_n_tokens(ConversationHandle c, out uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_n_decoded(ConversationHandle c, out uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_n_queued(ConversationHandle c, out uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_n_cells(ConversationHandle c, out uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_tokens(ConversationHandle c, int[] tokens, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_has_logits(ConversationHandle c, out int ready);
        [DllImport(Lib)] public static extern Status weft_conversation_logits(ConversationHandle c, float[] logits, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_sample(ConversationHandle c, out int token);
        [DllImport(Lib)] public static extern Status weft_sampler_params_init(ref SamplerParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_conversation_set_sampler(ConversationHandle c, ref SamplerParamsNative p);
        [DllImport(Lib)] public static extern Status weft_conversation_set_priority(ConversationHandle c, int priority);
        [DllImport(Lib)] public static extern Status weft_conversation_error(ConversationHandle c, out Status code, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_conversation_clear_error(ConversationHandle c);
        [DllImport(Lib)] public static extern Status weft_generate_params_init(ref GenerateParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_conversation_generate(ConversationHandle c, ref GenerateParamsNative p, out GenerationHandle g);
        [DllImport(Lib)] public static extern Status weft_conversation_generation(ConversationHandle c, out GenerationHandle g);

        [DllImport(Lib)] public static extern Status weft_bytes_data(BytesHandle b, out IntPtr data, out UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_bytes_free(IntPtr b);
        [DllImport(Lib)] public static extern Status weft_conversation_save(ConversationHandle c, out BytesHandle b);
        [DllImport(Lib)] public static extern Status weft_conversation_save_file(ConversationHandle c, byte[] path);
        [DllImport(Lib)] public static extern Status weft_conversation_save_tokens(ConversationHandle c, out BytesHandle b);
        [DllImport(Lib)] public static extern Status weft_conversation_save_async(ConversationHandle c, IntPtr callback, IntPtr userData);
        [DllImport(Lib)] public static extern Status weft_executor_load(ExecutorHandle executor, byte[] data, UIntPtr size, out ConversationHandle c);
        [DllImport(Lib)] public static extern Status weft_executor_load_file(ExecutorHandle executor, byte[] path, out ConversationHandle c);
        [DllImport(Lib)] public static extern Status weft_executor_save_all(ExecutorHandle executor, out BytesHandle b);
        [DllImport(Lib)] public static extern Status weft_executor_save_all_file(ExecutorHandle executor, byte[] path);
        [DllImport(Lib)] public static extern Status weft_executor_load_all(ExecutorHandle executor, byte[] data, UIntPtr size, out ConversationListHandle list);
        [DllImport(Lib)] public static extern Status weft_executor_load_all_file(ExecutorHandle executor, byte[] path, out ConversationListHandle list);
        [DllImport(Lib)] public static extern Status weft_conversation_list_count(ConversationListHandle list, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_list_get(ConversationListHandle list, UIntPtr index, out ulong savedId, out ConversationHandle c);
        [DllImport(Lib)] public static extern Status weft_conversation_list_free(IntPtr list);
        [DllImport(Lib)] public static extern IntPtr weft_residency_name(int residency);
        [DllImport(Lib)] public static extern Status weft_conversation_residency(ConversationHandle c, out int residency);
        [DllImport(Lib)] public static extern Status weft_conversation_park(ConversationHandle c, out int parked);
        [DllImport(Lib)] public static extern Status weft_conversation_prefetch(ConversationHandle c);

        [DllImport(Lib)] public static extern IntPtr weft_adapter_kind_name(int kind);
        [DllImport(Lib)] public static extern Status weft_model_load_adapter(ModelHandle model, byte[] path, out AdapterHandle adapter);
        [DllImport(Lib)] public static extern Status weft_adapter_free(IntPtr adapter);
        [DllImport(Lib)] public static extern Status weft_adapter_get_kind(AdapterHandle adapter, out int kind);
        [DllImport(Lib)] public static extern Status weft_adapter_name(AdapterHandle adapter, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_adapter_path(AdapterHandle adapter, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_adapter_fingerprint(AdapterHandle adapter, out ulong fingerprint);
        [DllImport(Lib)] public static extern Status weft_adapter_n_layers(AdapterHandle adapter, out int n);
        [DllImport(Lib)] public static extern Status weft_adapter_use_init(ref AdapterUseNative use, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_conversation_set_adapters(ConversationHandle c, AdapterUseNative[] uses, UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_adapters(ConversationHandle c, [In, Out] AdapterUseNative[] uses, UIntPtr capacity, out UIntPtr n);

        [DllImport(Lib)] public static extern Status weft_projector_params_init(ref ProjectorParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_projector_load(ModelHandle model, ref ProjectorParamsNative p, out ProjectorHandle projector);
        [DllImport(Lib)] public static extern Status weft_projector_free(IntPtr projector);
        [DllImport(Lib)] public static extern Status weft_projector_mrope(ProjectorHandle projector, out int v);
        [DllImport(Lib)] public static extern Status weft_projector_non_causal(ProjectorHandle projector, out int v);
        [DllImport(Lib)] public static extern Status weft_projector_vision(ProjectorHandle projector, out int v);
        [DllImport(Lib)] public static extern Status weft_projector_audio(ProjectorHandle projector, out int v, out int sampleRate);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_audio(ConversationHandle c, float[] samples, UIntPtr n);
        [DllImport(Lib)] public static extern IntPtr weft_media_marker();
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_text_with_images(ConversationHandle c, byte[] text, UIntPtr len, IntPtr[] images, UIntPtr n, uint flags);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_image(ConversationHandle c, byte[] file, UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_image_rgb(ConversationHandle c, uint width, uint height, byte[] rgb, UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_conversation_n_images(ConversationHandle c, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_conversation_image(ConversationHandle c, UIntPtr index, ref ImageSpanNative span);
        [DllImport(Lib)] public static extern int weft_image_token(ulong id);
        [DllImport(Lib)] public static extern Status weft_projector_prepare_image(ProjectorHandle projector, byte[] file, UIntPtr len, out PreparedImageHandle image);
        [DllImport(Lib)] public static extern Status weft_projector_prepare_image_rgb(ProjectorHandle projector, uint width, uint height, byte[] rgb, UIntPtr len, out PreparedImageHandle image);
        [DllImport(Lib)] public static extern Status weft_prepared_image_free(IntPtr image);
        [DllImport(Lib)] public static extern Status weft_prepared_image_n_tokens(PreparedImageHandle image, out uint n);
        [DllImport(Lib)] public static extern Status weft_conversation_prompt_prepared_image(ConversationHandle c, PreparedImageHandle image);

        [DllImport(Lib)] public static extern Status weft_generation_free(IntPtr g);
        [DllImport(Lib)] public static extern Status weft_generation_is_done(GenerationHandle g, out int done);
        [DllImport(Lib)] public static extern Status weft_generation_reason(GenerationHandle g, out int reason);
        [DllImport(Lib)] public static extern Status weft_generation_n_tokens(GenerationHandle g, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_generation_text(GenerationHandle g, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_generation_tokens(GenerationHandle g, int[] tokens, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_generation_logprob(GenerationHandle g, UIntPtr index, out TokenLogprobNative record, [Out] TokenLogprobNative[] top, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_generation_tool_call(GenerationHandle g, out int has, byte[] name, UIntPtr nameCapacity, out UIntPtr nameLen, byte[] arguments, UIntPtr argumentsCapacity, out UIntPtr argumentsLen);
        [DllImport(Lib)] public static extern Status weft_generation_drafts(GenerationHandle g, out uint drafted, out uint accepted);
        [DllImport(Lib)] public static extern IntPtr weft_drafter_name(int drafter);
        [DllImport(Lib)] public static extern Status weft_speculative_params_init(ref SpeculativeParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_draft_model_params_init(ref DraftModelParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_tools_prompt(IntPtr tools, UIntPtr n, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_tools_prompt_format(IntPtr tools, UIntPtr n, int format, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_tool_call_text(byte[] name, byte[] arguments, int format, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_tool_result_prompt(byte[] result, int format, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_generation_wait(GenerationHandle g, uint timeoutMs, out int done);
        [DllImport(Lib)] public static extern Status weft_generation_cancel(GenerationHandle g);
        [DllImport(Lib)] public static extern Status weft_generation_error(GenerationHandle g, out Status code, byte[] buf, UIntPtr capacity, out UIntPtr len);

        [DllImport(Lib)] public static extern Status weft_executor_embed(ExecutorHandle executor, IntPtr texts, UIntPtr n, out EmbeddingHandle embedding);
        [DllImport(Lib)] public static extern Status weft_executor_embed_tokens(ExecutorHandle executor, IntPtr inputs, UIntPtr[] nTokens, UIntPtr n, out EmbeddingHandle embedding);
        [DllImport(Lib)] public static extern Status weft_executor_embedding_size(ExecutorHandle executor, out uint n);
        [DllImport(Lib)] public static extern Status weft_embedding_free(IntPtr embedding);
        [DllImport(Lib)] public static extern Status weft_embedding_is_done(EmbeddingHandle embedding, out int done);
        [DllImport(Lib)] public static extern Status weft_embedding_wait(EmbeddingHandle embedding, uint timeoutMs, out int done);
        [DllImport(Lib)] public static extern Status weft_embedding_error(EmbeddingHandle embedding, out Status code, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_embedding_size(EmbeddingHandle embedding, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_embedding_n_done(EmbeddingHandle embedding, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_embedding_n_tokens(EmbeddingHandle embedding, UIntPtr index, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_embedding_n_embd(EmbeddingHandle embedding, out uint n);
        [DllImport(Lib)] public static extern Status weft_embedding_vector(EmbeddingHandle embedding, UIntPtr index, float[] buf, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_embedding_cancel(EmbeddingHandle embedding);

        // weft/c/memory.h
        [DllImport(Lib)] public static extern Status weft_memory_new(out MemoryHandle memory);
        [DllImport(Lib)] public static extern Status weft_memory_free(IntPtr memory);
        [DllImport(Lib)] public static extern Status weft_memory_add(MemoryHandle memory, ExecutorHandle executor, byte[] text, byte[] metadata, out ulong id);
        [DllImport(Lib)] public static extern Status weft_memory_add_vector(MemoryHandle memory, byte[] text, byte[] metadata, float[] vector, UIntPtr n, out ulong id);
        [DllImport(Lib)] public static extern Status weft_memory_remove(MemoryHandle memory, ulong id, out int removed);
        [DllImport(Lib)] public static extern Status weft_memory_clear(MemoryHandle memory);
        [DllImport(Lib)] public static extern Status weft_memory_size(MemoryHandle memory, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_pending(MemoryHandle memory, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_missing(MemoryHandle memory, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_embed_missing(MemoryHandle memory, ExecutorHandle executor, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_dimensions(MemoryHandle memory, out uint n);
        [DllImport(Lib)] public static extern Status weft_memory_get_text(MemoryHandle memory, ulong id, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_memory_get_metadata(MemoryHandle memory, ulong id, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_memory_get_vector(MemoryHandle memory, ulong id, float[] buf, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_hits_count(MemoryHitsHandle hits, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_memory_hits_id(MemoryHitsHandle hits, UIntPtr index, out ulong id);
        [DllImport(Lib)] public static extern Status weft_memory_hits_score(MemoryHitsHandle hits, UIntPtr index, out float score);
        [DllImport(Lib)] public static extern Status weft_memory_hits_text(MemoryHitsHandle hits, UIntPtr index, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_memory_hits_metadata(MemoryHitsHandle hits, UIntPtr index, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_memory_hits_free(IntPtr hits);
        [DllImport(Lib)] public static extern Status weft_memory_search_vector(MemoryHandle memory, float[] query, UIntPtr n, UIntPtr k, out MemoryHitsHandle hits);
        [DllImport(Lib)] public static extern Status weft_memory_search(MemoryHandle memory, ExecutorHandle executor, byte[] query, UIntPtr k, out MemorySearchHandle search);
        [DllImport(Lib)] public static extern Status weft_memory_search_is_ready(MemorySearchHandle search, out int ready);
        [DllImport(Lib)] public static extern Status weft_memory_search_wait(MemorySearchHandle search, uint timeoutMs, out int ready);
        [DllImport(Lib)] public static extern Status weft_memory_search_error(MemorySearchHandle search, out Status code, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_memory_search_hits(MemorySearchHandle search, out MemoryHitsHandle hits);
        [DllImport(Lib)] public static extern Status weft_memory_search_free(IntPtr search);
        [DllImport(Lib)] public static extern Status weft_memory_save(MemoryHandle memory, out BytesHandle b);
        [DllImport(Lib)] public static extern Status weft_memory_load(byte[] data, UIntPtr size, out MemoryHandle memory);
        [DllImport(Lib)] public static extern Status weft_conversation_set_memory(ConversationHandle c, MemoryHandle memory);
        [DllImport(Lib, EntryPoint = "weft_conversation_set_memory")] public static extern Status weft_conversation_set_memory_none(ConversationHandle c, IntPtr none);
        [DllImport(Lib)] public static extern Status weft_conversation_memory(ConversationHandle c, out MemoryHandle memory);
        [DllImport(Lib)] public static extern Status weft_compact_params_init(ref CompactParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_conversation_compact(ConversationHandle c, ref CompactParamsNative p);
        [DllImport(Lib)] public static extern Status weft_cosine_similarity(float[] a, UIntPtr nA, float[] b, UIntPtr nB, out float similarity);

        // --- Helpers ---------------------------------------------------------

        public static UIntPtr Size(int n) { return new UIntPtr((uint)n); }
        public static int Int(UIntPtr n) { return checked((int)n.ToUInt64()); }

        public static void Check(Status status)
        {
            if (status != Status.Ok) throw new WeftException(status, LastError());
        }

        public static string LastError() { return Utf8z(weft_last_error()); }

        public static byte[] Utf8(string s) { return Encoding.UTF8.GetBytes(s ?? ""); }

        // NUL-terminated UTF-8, for weft.h's NUL-terminated inputs.
        public static byte[] Utf8z(string s)
        {
            var n = Encoding.UTF8.GetByteCount(s);
            var b = new byte[n + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, b, 0);
            return b;
        }

        public static string Utf8(IntPtr p, int len)
        {
            if (p == IntPtr.Zero || len == 0) return "";
            var b = new byte[len];
            Marshal.Copy(p, b, 0, len);
            return Encoding.UTF8.GetString(b);
        }

        public static string Utf8z(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            int len = 0;
            while (Marshal.ReadByte(p, len) != 0) ++len;
            return Utf8(p, len);
        }

        public delegate Status BytesOut(byte[] buf, UIntPtr capacity, out UIntPtr len);
        public delegate Status ArrayOut<T>(T[] buf, UIntPtr capacity, out UIntPtr n);

        // The size query, then the copy; again if it grew in between.
        public static byte[] GetBytes(BytesOut call)
        {
            UIntPtr len;
            var status = call(null, UIntPtr.Zero, out len);
            for (int attempt = 0; status == Status.BufferTooSmall && attempt < 16; ++attempt)
            {
                var buf = new byte[Int(len) + 1];
                status = call(buf, Size(buf.Length), out len);
                if (status == Status.Ok)
                {
                    Array.Resize(ref buf, Int(len));
                    return buf;
                }
            }
            Check(status);
            return new byte[0];
        }

        public static string GetText(BytesOut call) { return Encoding.UTF8.GetString(GetBytes(call)); }

        // A weft_bytes handle's contents, copied; the handle is freed.
        public static byte[] TakeBytes(BytesHandle b)
        {
            using (b)
            {
                IntPtr data;
                UIntPtr size;
                Check(weft_bytes_data(b, out data, out size));
                var copy = new byte[Int(size)];
                if (copy.Length > 0) Marshal.Copy(data, copy, 0, copy.Length);
                return copy;
            }
        }

        public static T[] GetArray<T>(ArrayOut<T> call)
        {
            UIntPtr n;
            var status = call(null, UIntPtr.Zero, out n);
            if (status == Status.Ok) return new T[0];
            for (int attempt = 0; status == Status.BufferTooSmall && attempt < 16; ++attempt)
            {
                var buf = new T[Int(n)];
                status = call(buf, Size(buf.Length), out n);
                if (status == Status.Ok)
                {
                    Array.Resize(ref buf, Int(n));
                    return buf;
                }
            }
            Check(status);
            return new T[0];
        }
    }
}
