// Weft.Native.cs — the P/Invoke layer over include/weft/weft.h: handle
// types, blittable struct mirrors, extern declarations, UTF-8 helpers and the
// static callback trampolines. The public API is in Weft.cs.
//
// Every struct here mirrors one in weft.h field for field (same order, same
// widths; size_t = UIntPtr, pointers = IntPtr, weft_bool = int). Each carries
// its own size in struct_size, so a mismatch is refused by the library with
// Status.StructSize rather than misread.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;

#if UNITY_5_3_OR_NEWER
using MonoPInvokeCallbackAttribute = AOT.MonoPInvokeCallbackAttribute;
#endif

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
        protected override bool ReleaseHandle() { return Native.weft_bytes_free(handle) == Status.Ok; }
    }

    internal sealed class ConversationListHandle : WeftHandle
    {
        protected override bool ReleaseHandle() { return Native.weft_conversation_list_free(handle) == Status.Ok; }
    }

    // --- Struct mirrors ------------------------------------------------------

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
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct ModelInfoNative
    {
        public UIntPtr struct_size;
        public ulong n_params, size_bytes, fingerprint;
        public int n_vocab, n_ctx_train, n_embd, n_layer, bos, eos;
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
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct SamplerParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr grammar, grammar_root;
        public float temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
        public int top_k, penalty_last_n;
        public uint seed;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct GenerateParamsNative
    {
        public UIntPtr struct_size;
        public IntPtr sampler, stop;
        public UIntPtr n_stop;
        public IntPtr on_token, user_data, user_data_free;
        public uint max_tokens;
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

    internal static class Native
    {
#if (UNITY_IOS || UNITY_WEBGL) && !UNITY_EDITOR
        private const string Lib = "__Internal";  // statically linked into the player
#else
        private const string Lib = "weft";        // libweft.so / weft.dll / libweft.dylib
#endif

        [DllImport(Lib)] public static extern IntPtr weft_status_name(Status status);
        [DllImport(Lib)] public static extern IntPtr weft_last_error();
        [DllImport(Lib)] public static extern IntPtr weft_version();
        [DllImport(Lib)] public static extern IntPtr weft_llama_version();
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
        [DllImport(Lib)] public static extern Status weft_executor_cells_free(ExecutorHandle executor, out uint n);
        [DllImport(Lib)] public static extern Status weft_worker_params_init(ref WorkerParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_executor_start(ExecutorHandle executor, ref WorkerParamsNative p);
        [DllImport(Lib)] public static extern Status weft_executor_stop(ExecutorHandle executor);
        [DllImport(Lib)] public static extern Status weft_executor_is_running(ExecutorHandle executor, out int running);
        [DllImport(Lib)] public static extern Status weft_executor_poll_events(ExecutorHandle executor, UIntPtr max, out EventListHandle list);
        [DllImport(Lib)] public static extern Status weft_event_list_count(EventListHandle list, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_event_list_get(EventListHandle list, UIntPtr index, ref EventNative ev);
        [DllImport(Lib)] public static extern Status weft_event_list_free(IntPtr list);

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

        [DllImport(Lib)] public static extern Status weft_generation_free(IntPtr g);
        [DllImport(Lib)] public static extern Status weft_generation_is_done(GenerationHandle g, out int done);
        [DllImport(Lib)] public static extern Status weft_generation_reason(GenerationHandle g, out int reason);
        [DllImport(Lib)] public static extern Status weft_generation_n_tokens(GenerationHandle g, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_generation_text(GenerationHandle g, byte[] buf, UIntPtr capacity, out UIntPtr len);
        [DllImport(Lib)] public static extern Status weft_generation_tokens(GenerationHandle g, int[] tokens, UIntPtr capacity, out UIntPtr n);
        [DllImport(Lib)] public static extern Status weft_generation_wait(GenerationHandle g, uint timeoutMs, out int done);
        [DllImport(Lib)] public static extern Status weft_generation_cancel(GenerationHandle g);
        [DllImport(Lib)] public static extern Status weft_generation_error(GenerationHandle g, out Status code, byte[] buf, UIntPtr capacity, out UIntPtr len);

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

    // Unmanaged copies of what a call needs only while it runs (strings and
    // structs that params point to); freed on Dispose.
    internal sealed class CallMemory : IDisposable
    {
        private readonly List<IntPtr> blocks = new List<IntPtr>();

        public IntPtr Utf8z(string s)
        {
            if (s == null) return IntPtr.Zero;
            var b = Native.Utf8z(s);
            return Bytes(b);
        }

        public IntPtr Bytes(byte[] b)
        {
            var p = Marshal.AllocHGlobal(b.Length);
            blocks.Add(p);
            Marshal.Copy(b, 0, p, b.Length);
            return p;
        }

        public IntPtr Struct<T>(T value) where T : struct
        {
            var p = Marshal.AllocHGlobal(Marshal.SizeOf(typeof(T)));
            blocks.Add(p);
            Marshal.StructureToPtr(value, p, false);
            return p;
        }

        public IntPtr PointerArray(IntPtr[] items)
        {
            var p = Marshal.AllocHGlobal(IntPtr.Size * Math.Max(1, items.Length));
            blocks.Add(p);
            Marshal.Copy(items, 0, p, items.Length);
            return p;
        }

        public void Dispose()
        {
            foreach (var p in blocks) Marshal.FreeHGlobal(p);
            blocks.Clear();
        }
    }

    // What a generation's on_token callback reaches through its GCHandle.
    internal sealed class TokenSink
    {
        public Action<int, string> OnToken;
        public int Calls;           // under lock(this)
        public Exception Error;     // the first exception the callback threw
    }

    // Static trampolines: IL2CPP cannot hand instance delegates to native
    // code, so every callback goes through one static method, and its target
    // rides in user_data as a GCHandle that weft frees through FreeHandle
    // when it will not call again (weft.h: "Callbacks").
    internal static class Trampolines
    {
        // Static fields keep the delegates (and so the function pointers) alive.
        private static readonly FreeFn FreeDelegate = FreeHandle;
        private static readonly LogFn LogDelegate = OnLog;
        private static readonly ProgressFn ProgressDelegate = OnProgress;
        private static readonly PressureFn PressureDelegate = OnPressure;
        private static readonly TokenFn TokenDelegate = OnToken;

        public static readonly IntPtr Free = Marshal.GetFunctionPointerForDelegate(FreeDelegate);
        public static readonly IntPtr Log = Marshal.GetFunctionPointerForDelegate(LogDelegate);
        public static readonly IntPtr Progress = Marshal.GetFunctionPointerForDelegate(ProgressDelegate);
        public static readonly IntPtr Pressure = Marshal.GetFunctionPointerForDelegate(PressureDelegate);
        public static readonly IntPtr Token = Marshal.GetFunctionPointerForDelegate(TokenDelegate);

        public static IntPtr Pin(object target) { return GCHandle.ToIntPtr(GCHandle.Alloc(target)); }
        public static void Unpin(IntPtr userData) { GCHandle.FromIntPtr(userData).Free(); }

        [MonoPInvokeCallback(typeof(FreeFn))]
        private static void FreeHandle(IntPtr userData)
        {
            try { Unpin(userData); } catch { /* nothing may unwind into weft */ }
        }

        [MonoPInvokeCallback(typeof(LogFn))]
        private static void OnLog(int level, IntPtr line, UIntPtr len, IntPtr userData)
        {
            try
            {
                var cb = (Action<LogLevel, string>)GCHandle.FromIntPtr(userData).Target;
                cb((LogLevel)level, Native.Utf8(line, Native.Int(len)));
            }
            catch { /* a throwing log sink loses its line, nothing more */ }
        }

        [MonoPInvokeCallback(typeof(ProgressFn))]
        private static int OnProgress(float progress, IntPtr userData)
        {
            try
            {
                var cb = (Func<float, bool>)GCHandle.FromIntPtr(userData).Target;
                return cb(progress) ? 1 : 0;
            }
            catch { return 0; }  // a throwing progress callback cancels the load
        }

        [MonoPInvokeCallback(typeof(PressureFn))]
        private static void OnPressure(IntPtr conversation, uint needed, uint free, IntPtr userData)
        {
            try
            {
                var cb = (Action<PressureInfo>)GCHandle.FromIntPtr(userData).Target;
                using (var borrowed = new Conversation(new ConversationHandle(conversation)))
                    cb(new PressureInfo(borrowed, (int)needed, (int)free));
            }
            catch { /* documented: a throwing pressure callback freed nothing */ }
        }

        [MonoPInvokeCallback(typeof(TokenFn))]
        private static void OnToken(int token, IntPtr text, UIntPtr len, IntPtr userData)
        {
            TokenSink sink = null;
            try
            {
                sink = (TokenSink)GCHandle.FromIntPtr(userData).Target;
                sink.OnToken(token, Native.Utf8(text, Native.Int(len)));
            }
            catch (Exception e)
            {
                if (sink != null && sink.Error == null) sink.Error = e;
            }
            finally
            {
                if (sink != null)
                {
                    lock (sink)
                    {
                        ++sink.Calls;
                        Monitor.PulseAll(sink);
                    }
                }
            }
        }
    }
}
