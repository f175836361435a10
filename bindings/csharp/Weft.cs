// Weft.cs — the C# binding of weft (many LLM conversations on one llama.cpp
// context), over its C ABI (include/weft/weft.h) through Weft.Native*.cs.
// This file: the rules, Status, WeftException, the enums and Library. The
// rest, one file per concept as the C headers are: Weft.Model.cs,
// Weft.Executor.cs, Weft.Conversation.cs, Weft.Generation.cs, Weft.State.cs
// (save/load, SaveAsync, parking), Weft.Adapter.cs (LoRA adapters and
// control vectors per conversation), Weft.Model.Async.cs (LoadAsync),
// Weft.EventPump.cs (events without garbage), Weft.Lifetime.cs (the log
// callback, Library.Shutdown before a domain unload, GameDefaults),
// Weft.Projector.cs (images), Weft.Embedding.cs (text embeddings).
//
// Ownership: Model, Executor, Conversation, Generation, Adapter, Embedding and
// the native memory behind them are IDisposable (SafeHandles underneath, so a
// forgotten Dispose is cleaned up by the finalizer). They share what they
// point to, as in C++: disposing an Executor while Conversations are alive is
// safe (their calls then throw WeftException with Status.Disposed); disposing
// a Conversation disposes it in weft (its KV cells are freed); a Generation
// or an Embedding stays readable after its Conversation or Executor is gone.
//
// Thread-safety: every member may be called from any thread. Nothing waits
// for a running step (its decode or its sampling) except Conversation.Save
// and Executor.SaveAll, Executor.Step (steps run one after another),
// Executor.Stop and Executor.Dispose (the worker is joined, the context
// goes), and Generation.Wait and Embedding.Wait (by design): a game's main thread may prompt, generate, fork, rewind, dispose,
// park, load, poll and SaveAsync every frame. KV work they ask for is done
// at once when nobody else steps, else by the stepper (the worker) at its
// next step boundary, so KV facts (CellCount, CellsFree, Residency, the
// stats' cell counts) show it from that boundary on. Token callbacks run on the thread that
// steps (a thread of yours, or weft's own worker after Start): in Unity,
// touch no UnityEngine object from them; poll events
// (ExecutorParams.Events + PollEvents) on the main thread instead. See
// README.md.
//
// Errors: every failure is a WeftException whose Code is the weft_status and
// whose Message names the value and the limit.
using System;

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
    // The quantised ones (Q8_0 .. IQ4_NL) need flash attention and heads a multiple of 32 wide.
    public enum KvType { F16 = 0, F32 = 1, Q8_0 = 2, Bf16 = 3, Q4_0 = 4, Q4_1 = 5, Q5_0 = 6, Q5_1 = 7, Iq4Nl = 8 }
    // Auto: off on the CPU (llama.cpp's CPU kernel slows with depth); llama.cpp decides
    // when layers run on a GPU or the KV type needs it.
    public enum FlashAttention { Auto = 0, Enabled = 1, Disabled = 2 }
    // How Auto chose (ExecutorStats.FlashAttentionSource).
    public enum AttentionSource { Asked = 0, Gpu = 1, KvType = 2, Measured = 3, Remembered = 4, Fallback = 5, Environment = 6 }
    public enum PressurePolicy { Wait = 0, Fail = 1, Callback = 2 }
    // Who encodes queued images: the executor's encoder thread, or whoever
    // calls Executor.EncodeImages (a game that places each encode itself).
    public enum ImageEncoding { Thread = 0, Caller = 1 }
    public enum FinishReason { Running = 0, MaxTokens = 1, EndOfGeneration = 2, StopString = 3, ContextFull = 4, Cancelled = 5, Error = 6 }
    // ToolCall: a generation's tool call is complete, just before its Finished.
    public enum EventKind { Token = 0, Finished = 1, Error = 2, ToolCall = 3 }
    // Where a conversation's KV data is: in the cache, or parked.
    public enum Residency { Resident = 0, Ram = 1, Disk = 2, Recompute = 3 }
    // What an Adapter file holds (Weft.Adapter.cs).
    public enum AdapterKind { Lora = 0, ControlVector = 1 }

    // The library itself: versions, where its log lines go (SetLogCallback)
    // and Shutdown (Weft.Lifetime.cs).
    public static partial class Library
    {
        public static string Version { get { return Native.Utf8z(Native.weft_version()); } }
        public static string LlamaVersion { get { return Native.Utf8z(Native.weft_llama_version()); } }
        // The CPU code running: "native", "fixed", or the variant a portable
        // build chose for this CPU ("zen4", "haswell", ...; weft/backend.hpp).
        // Loads the native backend on first use; throws WeftException as
        // Model.Load would when a portable build's variants are missing.
        public static string CpuVariant
        {
            get
            {
                IntPtr variant;
                int dispatch;
                Native.Check(Native.weft_cpu_variant(out variant, out dispatch));
                return Native.Utf8z(variant);
            }
        }

        public static string StatusName(Status status) { return Native.Utf8z(Native.weft_status_name(status)); }
    }
}
