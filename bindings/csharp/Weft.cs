// Weft.cs — the C# binding of weft (many LLM conversations on one llama.cpp
// context), over its C ABI (include/weft/weft.h) through Weft.Native.cs.
//
// Ownership: Model, Executor, Conversation, Generation and the native
// memory behind them are IDisposable (SafeHandles underneath, so a forgotten
// Dispose is cleaned up by the finalizer). They share what they point to, as
// in C++: disposing an Executor while Conversations are alive is safe (their
// calls then throw WeftException with Status.Disposed); disposing a
// Conversation disposes it in weft (its KV cells are freed); a Generation
// stays readable after its Conversation is gone.
//
// Thread-safety: every member may be called from any thread. Executor.Step
// calls run one after another; prompting and reading never wait for a
// decode. Token callbacks run on the thread that steps (a worker thread, or
// weft's own worker after Start): in Unity, touch no UnityEngine object from
// them; poll events (ExecutorParams.Events + PollEvents) on the main thread
// instead. See README.md.
//
// Errors: every failure is a WeftException whose Code is the weft_status and
// whose Message names the value and the limit.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;

namespace Weft
{
    // weft_status: weft::Errc negated, then the C layer's own codes.
    public enum Status
    {
        Ok = 0,
        InvalidArgument = -1,
        OutOfRange = -2,
        NotFound = -3,
        Io = -4,
        Corrupt = -5,
        Incompatible = -6,
        Backend = -7,
        Disposed = -8,
        Cancelled = -9,
        NullArg = -20,
        StructSize = -21,
        BufferTooSmall = -22,
        InvalidHandle = -23,
        OutOfMemory = -24,
        Internal = -99,
    }

    public class WeftException : Exception
    {
        public WeftException(Status code, string message) : base(message) { Code = code; }
        public Status Code { get; private set; }
    }

    public enum LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, None = 4 }
    public enum KvType { F16 = 0, F32 = 1, Q8_0 = 2 }
    // Auto: off on the CPU (llama.cpp's CPU kernel slows with depth); llama.cpp decides
    // when layers run on a GPU or the KV type needs it.
    public enum FlashAttention { Auto = 0, Enabled = 1, Disabled = 2 }
    public enum PressurePolicy { Wait = 0, Fail = 1, Callback = 2 }
    public enum FinishReason { Running = 0, MaxTokens = 1, EndOfGeneration = 2, StopString = 3, ContextFull = 4, Cancelled = 5, Error = 6 }
    public enum EventKind { Token = 0, Finished = 1, Error = 2 }
    // Where a conversation's KV data is: in the cache, or parked.
    public enum Residency { Resident = 0, Ram = 1, Disk = 2, Recompute = 3 }

    // The library itself: versions and where its log lines go.
    public static class Library
    {
        public static string Version { get { return Native.Utf8z(Native.weft_version()); } }
        public static string LlamaVersion { get { return Native.Utf8z(Native.weft_llama_version()); } }

        public static string StatusName(Status status) { return Native.Utf8z(Native.weft_status_name(status)); }

        // Routes weft's and llama.cpp's log lines at `minLevel` or above to
        // `sink` (null silences weft, the default). The sink is called from
        // whichever thread logs, possibly concurrently.
        public static void SetLogCallback(Action<LogLevel, string> sink, LogLevel minLevel = LogLevel.Warn)
        {
            if (sink == null)
            {
                Native.Check(Native.weft_set_log_callback(IntPtr.Zero, (int)LogLevel.None, IntPtr.Zero, IntPtr.Zero));
                return;
            }
            var ud = Trampolines.Pin(sink);
            var status = Native.weft_set_log_callback(Trampolines.Log, (int)minLevel, ud, Trampolines.Free);
            if (status != Status.Ok) Trampolines.Unpin(ud);  // on failure, user_data stays ours
            Native.Check(status);
        }
    }

    // --- Model -----------------------------------------------------------------

    public sealed class ModelParams
    {
        public int GpuLayers;
        public bool UseMmap;
        public bool VocabOnly;
        // Progress in [0, 1] on the loading thread; return false to cancel.
        public Func<float, bool> OnProgress;

        public ModelParams()
        {
            var n = Defaults();
            GpuLayers = n.n_gpu_layers;
            UseMmap = n.use_mmap != 0;
            VocabOnly = n.vocab_only != 0;
        }

        internal static ModelParamsNative Defaults()
        {
            var n = new ModelParamsNative();
            Native.Check(Native.weft_model_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(ModelParamsNative)))));
            return n;
        }
    }

    public struct ModelInfo
    {
        public long ParameterCount, SizeBytes;
        public ulong Fingerprint;
        public int VocabSize, TrainContext, EmbeddingSize, LayerCount, Bos, Eos;
    }

    // A loaded GGUF model: immutable, shared by executors and threads.
    public sealed class Model : IDisposable
    {
        internal readonly ModelHandle Handle;

        private Model(ModelHandle handle) { Handle = handle; }

        public static Model Load(string path, ModelParams p = null)
        {
            if (path == null) throw new ArgumentNullException("path");
            p = p ?? new ModelParams();
            var n = ModelParams.Defaults();
            n.n_gpu_layers = p.GpuLayers;
            n.use_mmap = p.UseMmap ? 1 : 0;
            n.vocab_only = p.VocabOnly ? 1 : 0;
            var progress = IntPtr.Zero;
            using (var mem = new CallMemory())
            {
                n.path = mem.Utf8z(path);
                if (p.OnProgress != null)
                {
                    // Called during the load only: the handle goes right after.
                    progress = Trampolines.Pin(p.OnProgress);
                    n.on_progress = Trampolines.Progress;
                    n.progress_user_data = progress;
                }
                try
                {
                    ModelHandle h;
                    Native.Check(Native.weft_model_load(ref n, out h));
                    return new Model(h);
                }
                finally
                {
                    if (progress != IntPtr.Zero) Trampolines.Unpin(progress);
                }
            }
        }

        public int VocabSize
        {
            get { int n; Native.Check(Native.weft_model_n_vocab(Handle, out n)); return n; }
        }

        public ModelInfo Info
        {
            get
            {
                var n = new ModelInfoNative { struct_size = Native.Size(Marshal.SizeOf(typeof(ModelInfoNative))) };
                Native.Check(Native.weft_model_get_info(Handle, ref n));
                return new ModelInfo
                {
                    ParameterCount = (long)n.n_params, SizeBytes = (long)n.size_bytes, Fingerprint = n.fingerprint,
                    VocabSize = n.n_vocab, TrainContext = n.n_ctx_train, EmbeddingSize = n.n_embd,
                    LayerCount = n.n_layer, Bos = n.bos, Eos = n.eos,
                };
            }
        }

        public int[] Tokenize(string text, bool addBos = false, bool parseSpecial = false)
        {
            return TokenizeUtf8(Native.Utf8(text), addBos, parseSpecial);
        }

        // Raw bytes, validated as UTF-8 by weft (Status.InvalidArgument otherwise).
        public int[] TokenizeUtf8(byte[] utf8, bool addBos = false, bool parseSpecial = false)
        {
            var flags = TextFlags(addBos, parseSpecial);
            return Native.GetArray<int>((int[] buf, UIntPtr cap, out UIntPtr n) =>
                Native.weft_model_tokenize(Handle, utf8, Native.Size(utf8.Length), flags, buf, cap, out n));
        }

        public string Detokenize(int[] tokens, bool removeSpecial = false, bool renderSpecial = false)
        {
            uint flags = (removeSpecial ? 1u : 0u) | (renderSpecial ? 2u : 0u);
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_model_detokenize(Handle, tokens, Native.Size(tokens.Length), flags, buf, cap, out len));
        }

        // The bytes of one token: maybe a partial UTF-8 sequence, so bytes,
        // not a string (join pieces before decoding).
        public byte[] TokenPiece(int token, bool renderSpecial = false)
        {
            uint flags = renderSpecial ? 2u : 0u;
            return Native.GetBytes((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_model_token_piece(Handle, token, flags, buf, cap, out len));
        }

        public bool IsEndOfGeneration(int token)
        {
            int eog;
            Native.Check(Native.weft_model_is_eog(Handle, token, out eog));
            return eog != 0;
        }

        public string Description
        {
            get
            {
                return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_model_description(Handle, buf, cap, out len));
            }
        }

        // A metadata value ("general.name"); "" when absent.
        public string Meta(string key)
        {
            var k = Native.Utf8z(key);
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_model_meta(Handle, k, buf, cap, out len));
        }

        internal static uint TextFlags(bool addBos, bool parseSpecial)
        {
            return (addBos ? 1u : 0u) | (parseSpecial ? 2u : 0u);
        }

        public void Dispose() { Handle.Dispose(); }
    }

    // --- Executor ----------------------------------------------------------------

    public struct PressureInfo
    {
        internal PressureInfo(Conversation c, int needed, int free) { Conversation = c; NeededCells = needed; FreeCells = free; }
        // Borrowed: valid during the callback only.
        public Conversation Conversation { get; private set; }
        public int NeededCells { get; private set; }
        public int FreeCells { get; private set; }
    }

    public sealed class ExecutorParams
    {
        public int ContextSize, BatchSize, MicroBatchSize, MaxSequences, Threads, MaxPromptChunk, EventsCapacity;
        public KvType KvType;
        public FlashAttention FlashAttention;
        public PressurePolicy Pressure;
        // With PressurePolicy.Callback: runs on the stepping thread; may
        // rewind, shift, dispose or fork conversations.
        public Action<PressureInfo> OnPressure;
        // Queue token/finished/error events for PollEvents (the main-thread way).
        public bool Events;
        // Parking tiers for conversations beyond the slots or cells (used
        // before the pressure policy): RAM, then a disk directory, then
        // tokens only (re-decoded on return).
        public long SpillRamBytes, SpillDiskBytes;
        public string SpillDiskDir;
        public bool SpillRecompute;

        public ExecutorParams()
        {
            var n = Defaults();
            ContextSize = (int)n.n_ctx;
            BatchSize = (int)n.n_batch;
            MicroBatchSize = (int)n.n_ubatch;
            MaxSequences = (int)n.n_seq_max;
            Threads = n.n_threads;
            KvType = (KvType)n.kv_type;
            FlashAttention = (FlashAttention)n.flash_attn;
            Pressure = (PressurePolicy)n.pressure;
            MaxPromptChunk = (int)n.max_prompt_chunk;
            Events = n.events != 0;
            EventsCapacity = Native.Int(n.events_capacity);
            SpillRamBytes = (long)n.spill_ram_bytes;
            SpillDiskBytes = (long)n.spill_disk_bytes;
            SpillRecompute = n.spill_recompute != 0;
        }

        internal static ExecutorParamsNative Defaults()
        {
            var n = new ExecutorParamsNative();
            Native.Check(Native.weft_executor_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(ExecutorParamsNative)))));
            return n;
        }
    }

    public struct StepBudget
    {
        // Most tokens to decode; 0 (the default) = the executor's batch size
        // (n_batch), as 0 means in C++ and C. At most n_batch; negative throws.
        public int MaxTokens;
        // Soft target: decode what the learned cost model predicts fits.
        // null (the default) = none; a value must be > 0 (as in C++; C, which
        // has no "unset", uses 0 for none).
        public TimeSpan? MaxTime;
        // Hard limit from the call: stop between micro-batches once passed.
        public TimeSpan? Deadline;

        internal StepBudgetNative ToNative()
        {
            var n = new StepBudgetNative();
            Native.Check(Native.weft_step_budget_init(ref n, Native.Size(Marshal.SizeOf(typeof(StepBudgetNative)))));
            if (MaxTokens < 0) throw new ArgumentOutOfRangeException("MaxTokens", MaxTokens, "must be >= 0");
            n.max_tokens = (uint)MaxTokens;
            if (MaxTime.HasValue && MaxTime.Value <= TimeSpan.Zero)
                throw new ArgumentOutOfRangeException("MaxTime", MaxTime.Value, "must be > 0 (null = none)");
            if (MaxTime.HasValue) n.max_time_us = Math.Max(1, MaxTime.Value.Ticks / 10);
            if (Deadline.HasValue) n.deadline_us = Math.Max(1, Deadline.Value.Ticks / 10);
            return n;
        }
    }

    public struct StepResult
    {
        public int TokensDecoded, Conversations, TokensSampled, DecodeCalls, Failed, Blocked;
        public double Seconds, DecodeSeconds;
        public bool Idle, DeadlineHit;
    }

    public struct ExecutorStats
    {
        public int ContextSize, CellsUsed, CellsFree, MaxSequences, SlotsUsed, Conversations, Generating;
        public int Resident, ParkedRam, ParkedDisk, ParkedRecompute;
        public long QueuedTokens, Steps, TokensDecoded, TokensSampled, DecodeFailures, DeadlineStops, EventsDropped, CostModelSamples;
        public long RamBytes, DiskBytes, Parks, Restores, Recomputes;
        public double StepMsP50, StepMsP99, DecodeMsP50, PredictedMsPerToken, ParkMs, RestoreMs;
        public bool WorkerRunning;
    }

    public sealed class WorkerParams
    {
        public StepBudget Budget;  // no Deadline for the worker
        public TimeSpan IdleWait = TimeSpan.FromMilliseconds(100);
    }

    public struct Event
    {
        public EventKind Kind;
        public ulong ConversationId;
        public int Token;               // Token: the token; -1 otherwise
        public string Text;             // Token: the text it released
        public FinishReason Reason;     // Finished
        public Status ErrorCode;        // Error, Finished with Reason.Error
        public string ErrorMessage;
    }

    // One llama.cpp context shared by many conversations.
    public sealed class Executor : IDisposable
    {
        internal readonly ExecutorHandle Handle;
        private static readonly int ResultSize = Marshal.SizeOf(typeof(StepResultNative));

        public Executor(Model model, ExecutorParams p = null)
        {
            if (model == null) throw new ArgumentNullException("model");
            p = p ?? new ExecutorParams();
            var n = ExecutorParams.Defaults();
            n.n_ctx = (uint)p.ContextSize;
            n.n_batch = (uint)p.BatchSize;
            n.n_ubatch = (uint)p.MicroBatchSize;
            n.n_seq_max = (uint)p.MaxSequences;
            n.n_threads = p.Threads;
            n.kv_type = (int)p.KvType;
            n.flash_attn = (int)p.FlashAttention;
            n.pressure = (int)p.Pressure;
            n.max_prompt_chunk = (uint)p.MaxPromptChunk;
            n.events = p.Events ? 1 : 0;
            n.events_capacity = Native.Size(p.EventsCapacity);
            n.spill_ram_bytes = (ulong)Math.Max(0, p.SpillRamBytes);
            n.spill_disk_bytes = (ulong)Math.Max(0, p.SpillDiskBytes);
            n.spill_recompute = p.SpillRecompute ? 1 : 0;
            var ud = IntPtr.Zero;
            if (p.OnPressure != null)
            {
                ud = Trampolines.Pin(p.OnPressure);
                n.on_pressure = Trampolines.Pressure;
                n.pressure_user_data = ud;
                n.pressure_user_data_free = Trampolines.Free;  // weft frees it with the context
            }
            ExecutorHandle h;
            Status status;
            using (var mem = new CallMemory())
            {
                n.spill_disk_dir = mem.Utf8z(p.SpillDiskDir);
                status = Native.weft_executor_create(model.Handle, ref n, out h);
            }
            if (status != Status.Ok && ud != IntPtr.Zero) Trampolines.Unpin(ud);
            Native.Check(status);
            Handle = h;
        }

        public Conversation CreateConversation()
        {
            ConversationHandle h;
            Native.Check(Native.weft_conversation_create(Handle, out h));
            return new Conversation(h);
        }

        // One scheduling round; on_token callbacks run on this thread.
        public StepResult Step() { return Step(new StepBudget()); }

        public StepResult Step(StepBudget budget)
        {
            var b = budget.ToNative();
            var r = new StepResultNative { struct_size = Native.Size(ResultSize) };
            Native.Check(Native.weft_executor_step(Handle, ref b, ref r));
            return new StepResult
            {
                TokensDecoded = (int)r.tokens_decoded, Conversations = (int)r.conversations,
                TokensSampled = (int)r.tokens_sampled, DecodeCalls = (int)r.decode_calls, Failed = (int)r.failed,
                Blocked = (int)r.blocked, Seconds = r.seconds, DecodeSeconds = r.decode_seconds,
                Idle = r.idle != 0, DeadlineHit = r.deadline_hit != 0,
            };
        }

        // Steps on weft's own thread until Stop (or Dispose).
        public void Start(WorkerParams p = null)
        {
            p = p ?? new WorkerParams();
            var n = new WorkerParamsNative();
            Native.Check(Native.weft_worker_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(WorkerParamsNative)))));
            n.idle_wait_ms = (uint)Math.Max(0, p.IdleWait.TotalMilliseconds);
            using (var mem = new CallMemory())
            {
                n.budget = mem.Struct(p.Budget.ToNative());
                Native.Check(Native.weft_executor_start(Handle, ref n));
            }
        }

        public void Stop() { Native.Check(Native.weft_executor_stop(Handle)); }

        public bool IsRunning
        {
            get { int r; Native.Check(Native.weft_executor_is_running(Handle, out r)); return r != 0; }
        }

        // Up to `max` queued events (0 = all), oldest first. Never waits for a decode.
        public List<Event> PollEvents(int max = 0)
        {
            EventListHandle list;
            Native.Check(Native.weft_executor_poll_events(Handle, Native.Size(max), out list));
            using (list)
            {
                UIntPtr count;
                Native.Check(Native.weft_event_list_count(list, out count));
                var n = Native.Int(count);
                var events = new List<Event>(n);
                var e = new EventNative();
                var size = Native.Size(Marshal.SizeOf(typeof(EventNative)));
                for (int i = 0; i < n; ++i)
                {
                    e.struct_size = size;
                    Native.Check(Native.weft_event_list_get(list, Native.Size(i), ref e));
                    events.Add(new Event
                    {
                        Kind = (EventKind)e.kind, ConversationId = e.conversation, Token = e.token,
                        Text = Native.Utf8(e.text, Native.Int(e.text_len)), Reason = (FinishReason)e.reason,
                        ErrorCode = (Status)e.error_code, ErrorMessage = Native.Utf8z(e.error_message),
                    });
                }
                return events;
            }
        }

        public int CellsFree
        {
            get { uint n; Native.Check(Native.weft_executor_cells_free(Handle, out n)); return (int)n; }
        }

        // A conversation saved by Conversation.Save (any executor of the same
        // model): history, queue, logits, sampler state and a running
        // generation (without its callback) come back. Corrupt or foreign
        // state throws (Status.Corrupt, Incompatible) and changes nothing.
        public Conversation Load(byte[] state)
        {
            ConversationHandle h;
            Native.Check(Native.weft_executor_load(Handle, state, Native.Size(state.Length), out h));
            return new Conversation(h);
        }

        public Conversation Load(string path)
        {
            ConversationHandle h;
            Native.Check(Native.weft_executor_load_file(Handle, Native.Utf8z(path), out h));
            return new Conversation(h);
        }

        // Every conversation, resident and parked, with its Id.
        public byte[] SaveAll()
        {
            BytesHandle b;
            Native.Check(Native.weft_executor_save_all(Handle, out b));
            return Native.TakeBytes(b);
        }

        public void SaveAll(string path) { Native.Check(Native.weft_executor_save_all_file(Handle, Native.Utf8z(path))); }

        // A SaveAll snapshot, all or nothing: saved Id -> the new conversation.
        public Dictionary<ulong, Conversation> LoadAll(byte[] snapshot)
        {
            ConversationListHandle list;
            Native.Check(Native.weft_executor_load_all(Handle, snapshot, Native.Size(snapshot.Length), out list));
            return TakeAll(list);
        }

        public Dictionary<ulong, Conversation> LoadAll(string path)
        {
            ConversationListHandle list;
            Native.Check(Native.weft_executor_load_all_file(Handle, Native.Utf8z(path), out list));
            return TakeAll(list);
        }

        private static Dictionary<ulong, Conversation> TakeAll(ConversationListHandle list)
        {
            using (list)
            {
                UIntPtr count;
                Native.Check(Native.weft_conversation_list_count(list, out count));
                var result = new Dictionary<ulong, Conversation>();
                for (int i = 0; i < Native.Int(count); ++i)
                {
                    ulong id;
                    ConversationHandle h;
                    Native.Check(Native.weft_conversation_list_get(list, Native.Size(i), out id, out h));
                    result.Add(id, new Conversation(h));
                }
                return result;
            }
        }

        public ExecutorStats Stats
        {
            get
            {
                var s = new ExecutorStatsNative { struct_size = Native.Size(Marshal.SizeOf(typeof(ExecutorStatsNative))) };
                Native.Check(Native.weft_executor_get_stats(Handle, ref s));
                return new ExecutorStats
                {
                    ContextSize = (int)s.n_ctx, CellsUsed = (int)s.cells_used, CellsFree = (int)s.cells_free,
                    MaxSequences = (int)s.n_seq_max, SlotsUsed = (int)s.slots_used, Conversations = (int)s.conversations,
                    Generating = (int)s.generating, QueuedTokens = (long)s.queued_tokens, Steps = (long)s.steps,
                    TokensDecoded = (long)s.tokens_decoded, TokensSampled = (long)s.tokens_sampled,
                    DecodeFailures = (long)s.decode_failures, DeadlineStops = (long)s.deadline_stops,
                    EventsDropped = (long)s.events_dropped, CostModelSamples = (long)s.cost_model_samples,
                    StepMsP50 = s.step_ms_p50, StepMsP99 = s.step_ms_p99, DecodeMsP50 = s.decode_ms_p50,
                    PredictedMsPerToken = s.predicted_ms_per_token, WorkerRunning = s.worker_running != 0,
                    Resident = (int)s.resident, ParkedRam = (int)s.parked_ram, ParkedDisk = (int)s.parked_disk,
                    ParkedRecompute = (int)s.parked_recompute, RamBytes = (long)s.ram_bytes, DiskBytes = (long)s.disk_bytes,
                    Parks = (long)s.parks, Restores = (long)s.restores, Recomputes = (long)s.recomputes,
                    ParkMs = s.park_ms, RestoreMs = s.restore_ms,
                };
            }
        }

        // Stops the worker, ends running generations (Cancelled) and frees the
        // context once no other thread is inside a call on it.
        public void Dispose() { Handle.Dispose(); }
    }

    // --- Conversation ------------------------------------------------------------

    public sealed class SamplerParams
    {
        public float Temperature, TopP, MinP, RepeatPenalty, FrequencyPenalty, PresencePenalty;
        public int TopK, PenaltyLastN;
        public uint Seed;
        public string Grammar;      // GBNF; null = none
        public string GrammarRoot;  // null = "root"

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
            return n;
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
    }

    // One dialogue: history in the shared KV cache, queued input, logits, a
    // sampler and at most one running generation.
    public sealed class Conversation : IDisposable
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

        // The whole conversation as bytes (Executor.Load brings it back).
        public byte[] Save()
        {
            BytesHandle b;
            Native.Check(Native.weft_conversation_save(Handle, out b));
            return Native.TakeBytes(b);
        }

        // Written atomically: a failure leaves the previous file intact.
        public void Save(string path) { Native.Check(Native.weft_conversation_save_file(Handle, Native.Utf8z(path))); }

        public Residency Residency
        {
            get { int r; Native.Check(Native.weft_conversation_residency(Handle, out r)); return (Residency)r; }
        }

        // Moves it out of the cache now (a hint: it is restored when it next
        // runs); false when no parking tier could take it.
        public bool Park()
        {
            int parked;
            Native.Check(Native.weft_conversation_park(Handle, out parked));
            return parked != 0;
        }

        // Asks the next step to make it resident before it has input.
        public void Prefetch() { Native.Check(Native.weft_conversation_prefetch(Handle)); }

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
            TokenSink sink = null;
            var ud = IntPtr.Zero;
            using (var mem = new CallMemory())
            {
                if (p.Sampler != null) n.sampler = mem.Struct(p.Sampler.ToNative(mem));
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
                if (p.OnToken != null)
                {
                    sink = new TokenSink { OnToken = p.OnToken };
                    ud = Trampolines.Pin(sink);
                    n.on_token = Trampolines.Token;
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

    // --- Generation --------------------------------------------------------------

    // A running generation: poll it, wait for it, cancel it; readable after
    // its conversation is gone.
    public sealed class Generation : IDisposable
    {
        internal readonly GenerationHandle Handle;
        private readonly TokenSink sink;

        internal Generation(GenerationHandle handle, TokenSink sink)
        {
            Handle = handle;
            this.sink = sink;
        }

        // Done, and (with an OnToken callback) every token's callback has run.
        public bool IsDone
        {
            get
            {
                int done;
                Native.Check(Native.weft_generation_is_done(Handle, out done));
                return done != 0 && CallbacksCaughtUp(0);
            }
        }

        public FinishReason Reason
        {
            get { int r; Native.Check(Native.weft_generation_reason(Handle, out r)); return (FinishReason)r; }
        }

        public int TokenCount
        {
            get { UIntPtr n; Native.Check(Native.weft_generation_n_tokens(Handle, out n)); return Native.Int(n); }
        }

        // The text released so far; complete once done.
        public string Text
        {
            get
            {
                return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_generation_text(Handle, buf, cap, out len));
            }
        }

        public int[] Tokens
        {
            get
            {
                return Native.GetArray<int>((int[] buf, UIntPtr cap, out UIntPtr n) =>
                    Native.weft_generation_tokens(Handle, buf, cap, out n));
            }
        }

        // For Reason == Error: what went wrong; null otherwise.
        public WeftException Error
        {
            get
            {
                Status code = Status.Ok;
                var msg = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_generation_error(Handle, out code, buf, cap, out len));
                return code == Status.Ok ? null : new WeftException(code, msg);
            }
        }

        // The first exception the OnToken callback threw (it is caught at the
        // native boundary: nothing may unwind into weft).
        public Exception CallbackException { get { return sink == null ? null : sink.Error; } }

        // Waits until done and, with an OnToken callback, until every sampled
        // token's callback has returned (weft may report done just before the
        // last callback runs on the stepping thread). Someone must be stepping.
        public bool Wait(TimeSpan timeout)
        {
            var start = DateTime.UtcNow;
            var ms = (uint)Math.Max(0, Math.Min(uint.MaxValue, timeout.TotalMilliseconds));
            int done;
            Native.Check(Native.weft_generation_wait(Handle, ms, out done));
            if (done == 0) return false;
            var left = timeout - (DateTime.UtcNow - start);
            return CallbacksCaughtUp(Math.Max(0, (int)Math.Min(int.MaxValue, left.TotalMilliseconds)));
        }

        public void Cancel() { Native.Check(Native.weft_generation_cancel(Handle)); }

        public void Dispose() { Handle.Dispose(); }

        private bool CallbacksCaughtUp(int timeoutMs)
        {
            if (sink == null) return true;
            var expected = TokenCount;
            var deadline = DateTime.UtcNow.AddMilliseconds(timeoutMs);
            lock (sink)
            {
                while (sink.Calls < expected)
                {
                    var left = (int)(deadline - DateTime.UtcNow).TotalMilliseconds;
                    if (left <= 0) return false;
                    Monitor.Wait(sink, left);
                }
            }
            return true;
        }
    }
}
