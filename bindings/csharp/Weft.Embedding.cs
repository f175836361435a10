// Weft.Embedding.cs — text embeddings decoded by the executor's steps:
// EmbedderParams (ExecutorParams.Embedder), Executor.Embed and
// EmbedTokens, the Embedding handle, CosineSimilarity
// (include/weft/c/embedding.h). Part of the binding; the rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    // How a text's token states become one vector (weft_pooling).
    public enum Pooling
    {
        Model = 0,  // what the model's GGUF declares; mean when it declares none
        Mean = 1,   // the mean over the text's tokens
        Cls = 2,    // the first token's state (BERT-style [CLS])
        Last = 3,   // the last token's state (decoder models trained for it)
    }

    // ExecutorParams.Embedder: the executor makes a second llama.cpp context
    // (embeddings on, pooled) whose texts its steps decode beside the
    // conversations, under the same budgets.
    public sealed class EmbedderParams
    {
        // The embedding model (an encoder, or a decoder with pooling); the
        // executor keeps its own reference, so it may be disposed once the
        // executor exists. null (the default) = the executor's own model,
        // its hidden states pooled (weaker than a trained embedding model).
        public Model Model;
        public Pooling Pooling;
        // Most tokens of one text and of one embeddings decode, in [8, the
        // model's n_ctx_train]. Default 512.
        public int ContextSize;
        // Most texts in one decode, [1, 256]. Default 16.
        public int MaxSequences;
        // Scale each vector to unit length, so that a dot product is the
        // cosine similarity. Default true.
        public bool Normalize;

        public EmbedderParams()
        {
            var n = ExecutorParams.Defaults();
            Pooling = (Pooling)n.embed_pooling;
            ContextSize = (int)n.embed_n_ctx;
            MaxSequences = (int)n.embed_n_seq_max;
            Normalize = n.embed_normalize != 0;
        }

        internal void Check()
        {
            if (ContextSize < 0) throw new ArgumentOutOfRangeException("ContextSize", ContextSize, "must be >= 0");
            if (MaxSequences < 0) throw new ArgumentOutOfRangeException("MaxSequences", MaxSequences, "must be >= 0");
        }

        // Into the native params (after Check); a Model's handle is
        // AddRef'ed (`added`) until the create call returns.
        internal void Apply(ref ExecutorParamsNative n, ref bool added)
        {
            n.embedder = 1;
            n.embed_pooling = (int)Pooling;
            n.embed_n_ctx = (uint)ContextSize;
            n.embed_n_seq_max = (uint)MaxSequences;
            n.embed_normalize = Normalize ? 1 : 0;
            if (Model == null) return;
            Model.Handle.DangerousAddRef(ref added);
            n.embedding_model = Model.Handle.DangerousGetHandle();
        }
    }

    public sealed partial class Executor
    {
        // Queues texts for embedding and returns at once; the steps decode
        // them (a Step loop or the worker must run). WeftException:
        // InvalidArgument (no ExecutorParams.Embedder, no texts, a text with
        // no tokens), NullArg (a null text, naming its index), OutOfRange (a
        // text longer than EmbedderParams.ContextSize tokens), Disposed.
        // Never waits for a step.
        public Embedding Embed(params string[] texts)
        {
            if (texts == null) throw new ArgumentNullException("texts");
            EmbeddingHandle h;
            using (var mem = new CallMemory())
            {
                var ptrs = new IntPtr[texts.Length];
                for (int i = 0; i < texts.Length; ++i) ptrs[i] = mem.Utf8z(texts[i]);
                Native.Check(Native.weft_executor_embed(Handle, mem.PointerArray(ptrs), Native.Size(ptrs.Length), out h));
            }
            return new Embedding(h);
        }

        // The same for token inputs of the embedding model (no BOS/EOS
        // added); a token outside its vocabulary is OutOfRange.
        public Embedding EmbedTokens(params int[][] inputs)
        {
            if (inputs == null) throw new ArgumentNullException("inputs");
            EmbeddingHandle h;
            using (var mem = new CallMemory())
            {
                var ptrs = new IntPtr[inputs.Length];
                var lens = new UIntPtr[Math.Max(1, inputs.Length)];
                for (int i = 0; i < inputs.Length; ++i)
                {
                    if (inputs[i] == null) throw new ArgumentNullException("inputs[" + i + "]");
                    ptrs[i] = mem.Ints(inputs[i]);
                    lens[i] = Native.Size(inputs[i].Length);
                }
                Native.Check(Native.weft_executor_embed_tokens(Handle, mem.PointerArray(ptrs), lens,
                                                               Native.Size(ptrs.Length), out h));
            }
            return new Embedding(h);
        }

        // The vectors' width; 0 without ExecutorParams.Embedder.
        public int EmbeddingSize
        {
            get { uint n; Native.Check(Native.weft_executor_embedding_size(Handle, out n)); return (int)n; }
        }
    }

    // Texts queued by Executor.Embed: poll it, wait for it, read its vectors,
    // cancel it. Independent of its executor: disposing either first is safe
    // (an executor disposed before the work is done ends it with
    // Status.Disposed; the vectors made by then stay readable). The work
    // stays queued while the executor lives, whether or not this is kept.
    public sealed class Embedding : IDisposable
    {
        internal readonly EmbeddingHandle Handle;
        private readonly int count, dimensions;

        internal Embedding(EmbeddingHandle handle)
        {
            Handle = handle;
            UIntPtr n;
            uint d;
            Native.Check(Native.weft_embedding_size(handle, out n));
            Native.Check(Native.weft_embedding_n_embd(handle, out d));
            count = Native.Int(n);
            dimensions = (int)d;
        }

        // Every input has its vector, or the work failed or was cancelled (Error).
        public bool IsDone
        {
            get { int done; Native.Check(Native.weft_embedding_is_done(Handle, out done)); return done != 0; }
        }

        // Waits until done or `timeout` passes; returns IsDone. Someone must
        // be stepping the executor.
        public bool Wait(TimeSpan timeout)
        {
            var ms = (uint)Math.Max(0, Math.Min(uint.MaxValue, timeout.TotalMilliseconds));
            int done;
            Native.Check(Native.weft_embedding_wait(Handle, ms, out done));
            return done != 0;
        }

        // Why the work ended without all its vectors (Status.Backend,
        // Cancelled, Disposed); null while running and after success.
        public WeftException Error
        {
            get
            {
                Status code = Status.Ok;
                var msg = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_embedding_error(Handle, out code, buf, cap, out len));
                return code == Status.Ok ? null : new WeftException(code, msg);
            }
        }

        // The inputs given to Embed, of them embedded so far, and the
        // vectors' width (the embedding model's).
        public int Count { get { return count; } }
        public int DoneCount
        {
            get { UIntPtr n; Native.Check(Native.weft_embedding_n_done(Handle, out n)); return Native.Int(n); }
        }
        public int Dimensions { get { return dimensions; } }

        // Input `index`'s tokens (with the BOS/EOS/SEP its model adds): what
        // it costs to embed. ArgumentOutOfRangeException past Count.
        public int TokenCount(int index)
        {
            if (index < 0 || index >= count)
                throw new ArgumentOutOfRangeException("index", index, "the embedding has " + count + " inputs");
            UIntPtr n;
            Native.Check(Native.weft_embedding_n_tokens(Handle, Native.Size(index), out n));
            return Native.Int(n);
        }

        // Input `index`'s vector (a copy), or null while it is not embedded
        // (or never will be: see Error). ArgumentOutOfRangeException past Count.
        public float[] Vector(int index)
        {
            if (index < 0 || index >= count)
                throw new ArgumentOutOfRangeException("index", index, "the embedding has " + count + " inputs");
            var v = new float[dimensions];
            UIntPtr n;
            Native.Check(Native.weft_embedding_vector(Handle, Native.Size(index), v, Native.Size(v.Length), out n));
            return Native.Int(n) == 0 ? null : v;
        }

        // Every input's vector, in order (null entries not yet embedded).
        public float[][] Vectors
        {
            get
            {
                var all = new float[count][];
                for (int i = 0; i < count; ++i) all[i] = Vector(i);
                return all;
            }
        }

        // Drops the inputs not yet embedded: done at once, Error Cancelled
        // unless all were embedded already. Never waits for a step.
        public void Cancel() { Native.Check(Native.weft_embedding_cancel(Handle)); }

        public void Dispose() { Handle.Dispose(); }

        // The cosine similarity of two vectors of equal width (their dot
        // product when both are unit length); 0 when either has zero length.
        // WeftException InvalidArgument for unequal or zero widths.
        public static float CosineSimilarity(float[] a, float[] b)
        {
            if (a == null) throw new ArgumentNullException("a");
            if (b == null) throw new ArgumentNullException("b");
            float s;
            Native.Check(Native.weft_cosine_similarity(a, Native.Size(a.Length), b, Native.Size(b.Length), out s));
            return s;
        }
    }
}
