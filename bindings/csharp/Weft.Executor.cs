// Weft.Executor.cs — Executor: one llama.cpp context shared by many
// conversations; its parameters, step budgets and results, stats, worker
// and events (include/weft/c/executor.h, events.h). Saving and loading:
// Weft.State.cs. Part of the binding; the rules are in Weft.cs.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Weft
{
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
        // Queue token/finished/error/tool-call events for PollEvents (the main-thread way).
        public bool Events;
        // Parking tiers for conversations beyond the slots or cells (used
        // before the pressure policy): RAM, then a disk directory, then
        // tokens only (re-decoded on return).
        public long SpillRamBytes, SpillDiskBytes;
        public string SpillDiskDir;
        public bool SpillRecompute;
        // Prefix reuse: most KV cells the prefix cache keeps; -1 = n_ctx / 4,
        // 0 = reuse off. Default -1.
        public long PrefixCacheCells;
        // Images (Conversation.PromptImage): a projector loaded for this
        // model; the executor keeps its own reference. null = no images.
        public Projector Projector;
        // Who encodes its images: ImageEncoding.Thread (the default), or
        // Caller: nothing encodes them until Executor.EncodeImages is called.
        public ImageEncoding ImageEncoding;
        // Where FlashAttention.Auto keeps its probe's timings (one probe per
        // model, machine, build and shape). null = the default cache folder
        // ($WEFT_CACHE_DIR, XDG, %LOCALAPPDATA%\weft, ~/.cache/weft); "" =
        // this process only. A game passes Application.persistentDataPath.
        public string TuningCacheDir;
        // Text embeddings (Executor.Embed, Weft.Embedding.cs): null (the
        // default) = none, and Embed throws Status.InvalidArgument.
        public EmbedderParams Embedder;
        // Speculative decoding for generations whose GenerateParams.Speculative
        // is null (Weft.Speculative.cs). null (the default) = no drafter.
        public SpeculativeParams Speculative;
        // The model Drafter.Model drafts with (Weft.Speculative.cs). null (the
        // default) = none: a generation asking for Drafter.Model throws
        // WeftException InvalidArgument.
        public DraftModelParams DraftModel;

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
            PrefixCacheCells = n.prefix_cache_cells;
            ImageEncoding = (ImageEncoding)n.image_encoding;
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
        // Tokens decoded for Executor.Embed (not in TokensDecoded), and the
        // texts whose vectors this step made.
        public int TokensEmbedded, TextsEmbedded;
        // Speculative decoding: draft tokens verified (in TokensDecoded), and
        // of those kept (in TokensSampled).
        public int TokensDrafted, DraftsAccepted;
        // Seconds in the draft model's context (Drafter.Model).
        public double DraftSeconds;
    }

    public struct ExecutorStats
    {
        public int ContextSize, CellsUsed, CellsFree, MaxSequences, SlotsUsed, Conversations, Generating;
        public int Resident, ParkedRam, ParkedDisk, ParkedRecompute;
        public long QueuedTokens, Steps, TokensDecoded, TokensSampled, DecodeFailures, DeadlineStops, EventsDropped, CostModelSamples;
        public long RamBytes, DiskBytes, Parks, Restores, Recomputes;
        public double StepMsP50, StepMsP99, DecodeMsP50, PredictedMsPerToken, ParkMs, RestoreMs;
        public bool WorkerRunning;
        // Prefix reuse (see ExecutorParams.PrefixCacheCells).
        public long PrefixTokensReused, PrefixHits, PrefixCacheHits, PrefixMisses, PrefixEvictions, CellsSaved;
        public int PrefixCacheCells, PinnedPrefixes;
        // Adapters: times a step switched the context's adapter setting (each
        // a llama_decode of its own), and what the cost model has learnt a
        // switch adds to that decode.
        public long AdapterSwitches;
        public double AdapterSwitchMs;
        // Images: encoded by the executor's encoder (its thread or
        // EncodeImages callers) and its total time on them (never inside a
        // step); embeddings batches decoded by steps and their total decode
        // time; images queued for the encoder or being encoded now.
        public long ImagesEncoded, ImageBatches;
        public double ImageEncodeMs, ImageDecodeMs;
        public int ImagesPending;
        // The attention kernel the context uses (Auto: llama.cpp decided, with
        // GPU layers or a q8_0 cache), how it was chosen, and for a probe one
        // generation step plus one prompt chunk at its shape (ProbeSeqs
        // conversations x ProbeDepth cells) with and without flash attention.
        public FlashAttention FlashAttention;
        public AttentionSource FlashAttentionSource;
        public double FlashAttentionProbeMs, PlainAttentionProbeMs;
        public int AttentionProbeSeqs, AttentionProbeDepth;
        // Conversations decoded again from their start because the model's
        // memory could not be cut where asked (ModelInfo.Memory), and the
        // positions that took.
        public long Redecodes, RedecodeTokens;
        // Embeddings (ExecutorParams.Embedder): texts embedded, their tokens,
        // the llama_decode calls and time they took, and texts queued now.
        public long TextsEmbedded, EmbedTokens, EmbedDecodes;
        public double EmbedMs;
        public int EmbedPending;
        // Speculative decoding: draft tokens verified (counted in
        // TokensDecoded), and of those kept (counted in TokensSampled).
        public long TokensDrafted, DraftsAccepted;
        // Drafter.Model: tokens decoded in the draft model's context (catching
        // conversations up and drafting) and the seconds that took.
        public long DraftModelTokens;
        public double DraftModelSeconds;
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
        public string Text;             // Token: the text it released; ToolCall: the arguments (JSON)
        public FinishReason Reason;     // Finished
        public Status ErrorCode;        // Error, Finished with Reason.Error
        public string ErrorMessage;
        public string ToolName;         // ToolCall: the tool's name; "" otherwise
    }

    // One llama.cpp context shared by many conversations.
    public sealed partial class Executor : IDisposable
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
            n.prefix_cache_cells = p.PrefixCacheCells;
            n.image_encoding = (int)p.ImageEncoding;
            if (p.Embedder != null) p.Embedder.Check();
            if (p.DraftModel != null) p.DraftModel.Check();
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
            bool projectorRef = false, embedderRef = false, draftRef = false;
            using (var mem = new CallMemory())
            {
                try
                {
                    n.spill_disk_dir = mem.Utf8z(p.SpillDiskDir);
                    n.tuning_cache_dir = mem.Utf8z(p.TuningCacheDir);
                    if (p.Projector != null)
                    {
                        p.Projector.Handle.DangerousAddRef(ref projectorRef);
                        n.projector = p.Projector.Handle.DangerousGetHandle();
                    }
                    if (p.Embedder != null) p.Embedder.Apply(ref n, ref embedderRef);
                    if (p.Speculative != null) n.speculative = mem.Struct(p.Speculative.ToNative());
                    if (p.DraftModel != null) n.draft_model = mem.Struct(p.DraftModel.ToNative(ref draftRef));
                    status = Native.weft_executor_create(model.Handle, ref n, out h);
                }
                finally
                {
                    if (projectorRef) p.Projector.Handle.DangerousRelease();
                    if (embedderRef) p.Embedder.Model.Handle.DangerousRelease();
                    if (draftRef) p.DraftModel.Model.Handle.DangerousRelease();
                }
            }
            if (status != Status.Ok && ud != IntPtr.Zero) Trampolines.Unpin(ud);
            Native.Check(status);
            Handle = h;
            Live.Add(Live.Executors, this);  // Library.Shutdown disposes it
        }

        public Conversation CreateConversation()
        {
            ConversationHandle h;
            Native.Check(Native.weft_conversation_create(Handle, out h));
            return new Conversation(h);
        }

        // One scheduling round; on_token callbacks run on this thread. Steps
        // run one after another: this waits for one running on another thread
        // (the worker's).
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
                TokensEmbedded = (int)r.tokens_embedded, TextsEmbedded = (int)r.texts_embedded,
                TokensDrafted = (int)r.tokens_drafted, DraftsAccepted = (int)r.drafts_accepted,
                DraftSeconds = r.draft_seconds,
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

        // Stops the worker after its current step (waiting for it) and joins it.
        // Nothing is lost: input stays queued, generations stay running.
        public void Stop() { Native.Check(Native.weft_executor_stop(Handle)); }

        public bool IsRunning
        {
            get { int r; Native.Check(Native.weft_executor_is_running(Handle, out r)); return r != 0; }
        }

        // Up to `max` queued events (0 = all), oldest first. Never waits for a
        // step or its sampling.
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
                        ToolName = Native.Utf8z(e.tool_name),
                    });
                }
                return events;
            }
        }

        // Free KV cells as of the last step boundary (shared cells count once).
        // Keeps these tokens decoded for prefix reuse until unpinned (a lore
        // that begins many conversations); never waits for a step.
        public void PinPrefix(int[] tokens)
        {
            Native.Check(Native.weft_executor_pin_prefix(Handle, tokens, Native.Size(tokens.Length)));
        }

        // False when they were not pinned.
        public bool UnpinPrefix(int[] tokens)
        {
            int was;
            Native.Check(Native.weft_executor_unpin_prefix(Handle, tokens, Native.Size(tokens.Length), out was));
            return was != 0;
        }

        public int CellsFree
        {
            get { uint n; Native.Check(Native.weft_executor_cells_free(Handle, out n)); return (int)n; }
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
                    PrefixTokensReused = (long)s.prefix_tokens_reused, PrefixHits = (long)s.prefix_hits,
                    PrefixCacheHits = (long)s.prefix_cache_hits, PrefixMisses = (long)s.prefix_misses,
                    PrefixEvictions = (long)s.prefix_evictions, CellsSaved = (long)s.cells_saved,
                    PrefixCacheCells = (int)s.prefix_cache_cells, PinnedPrefixes = (int)s.pinned_prefixes,
                    AdapterSwitches = (long)s.adapter_switches, AdapterSwitchMs = s.adapter_switch_ms,
                    ImagesEncoded = (long)s.images_encoded, ImageEncodeMs = s.image_encode_ms,
                    ImageBatches = (long)s.image_batches, ImageDecodeMs = s.image_decode_ms,
                    ImagesPending = (int)s.images_pending,
                    FlashAttention = (FlashAttention)s.flash_attn, FlashAttentionSource = (AttentionSource)s.flash_attn_source,
                    FlashAttentionProbeMs = s.flash_attn_probe_ms, PlainAttentionProbeMs = s.plain_attn_probe_ms,
                    AttentionProbeSeqs = (int)s.attn_probe_seqs, AttentionProbeDepth = (int)s.attn_probe_depth,
                    Redecodes = (long)s.redecodes, RedecodeTokens = (long)s.redecode_tokens,
                    TextsEmbedded = (long)s.texts_embedded, EmbedTokens = (long)s.embed_tokens,
                    EmbedDecodes = (long)s.embed_decodes, EmbedMs = s.embed_ms, EmbedPending = (int)s.embed_pending,
                    TokensDrafted = (long)s.tokens_drafted, DraftsAccepted = (long)s.drafts_accepted,
                    DraftModelTokens = (long)s.draft_model_tokens, DraftModelSeconds = s.draft_model_seconds,
                };
            }
        }

        // Stops the worker, ends running generations (Cancelled) and frees the
        // context once no other thread is inside a call on it; waits for a
        // running step. A SaveAsync still pending then faults with
        // Status.Disposed.
        public void Dispose() { Handle.Dispose(); }
    }
}
