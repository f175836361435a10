// Weft.Model.cs — Model: a loaded GGUF file (include/weft/c/model.h).
// Part of the binding; the rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    public sealed class ModelParams
    {
        public int GpuLayers;
        public bool UseMmap;
        public bool VocabOnly;
        // ggml-rpc-server peers holding the layers, "host:port,host:port";
        // null: none (docs/DEPLOYING.md, "RPC").
        public string Rpc;
        public int RpcTimeoutMs;
        // Bound on any one answer from an RPC peer; a peer that fails makes
        // the model's decodes fail with WeftException (Backend). Default 60000.
        public long RpcReplyTimeoutMs;
        // Progress in [0, 1] on the loading thread; return false to cancel.
        public Func<float, bool> OnProgress;

        public ModelParams()
        {
            var n = Defaults();
            GpuLayers = n.n_gpu_layers;
            UseMmap = n.use_mmap != 0;
            VocabOnly = n.vocab_only != 0;
            RpcTimeoutMs = n.rpc_timeout_ms;
            RpcReplyTimeoutMs = n.rpc_reply_timeout_ms;
        }

        internal static ModelParamsNative Defaults()
        {
            var n = new ModelParamsNative();
            Native.Check(Native.weft_model_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(ModelParamsNative)))));
            return n;
        }
    }

    // How a model's memory keeps a conversation: what a rewind or a fork of
    // a prefix costs (weft_model_memory; docs/EXECUTOR.md, "Model families").
    public enum ModelMemory { Plain = 0, SlidingWindow = 1, Recurrent = 2, Hybrid = 3 }

    public struct ModelInfo
    {
        public long ParameterCount, SizeBytes;
        public ulong Fingerprint;
        public int VocabSize, TrainContext, EmbeddingSize, LayerCount, Bos, Eos;
        public ModelMemory Memory;
        public int SlidingWindow;  // tokens; 0 but for a sliding-window model
        public ToolFormat ToolFormat;  // how its chat template writes a tool call (never Automatic)
    }

    // A loaded GGUF model: immutable, shared by executors and threads.
    public sealed partial class Model : IDisposable
    {
        internal readonly ModelHandle Handle;

        private Model(ModelHandle handle) { Handle = handle; Live.Add(Live.Models, this); }

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
                if (p.Rpc != null) n.rpc = mem.Utf8z(p.Rpc);
                n.rpc_timeout_ms = p.RpcTimeoutMs;
                n.rpc_reply_timeout_ms = p.RpcReplyTimeoutMs;
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
                    Memory = (ModelMemory)n.memory, SlidingWindow = n.sliding_window,
                    ToolFormat = (ToolFormat)n.tool_format,
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

        // A LoRA adapter or control vector for this model (the kind is read
        // from the file), for Conversation.SetAdapters. Each call loads the
        // file again. It keeps the model's weights alive: this Model may be
        // disposed first. Status.NotFound, Corrupt, InvalidArgument (neither
        // kind, or made for another model).
        public Adapter LoadAdapter(string path)
        {
            if (path == null) throw new ArgumentNullException("path");
            AdapterHandle h;
            Native.Check(Native.weft_model_load_adapter(Handle, Native.Utf8z(path), out h));
            return new Adapter(h);
        }

        internal static uint TextFlags(bool addBos, bool parseSpecial)
        {
            return (addBos ? 1u : 0u) | (parseSpecial ? 2u : 0u);
        }

        public void Dispose() { Handle.Dispose(); }
    }
}
