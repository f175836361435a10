// Weft.Memory.cs — what an NPC remembers: Memory (texts with metadata and
// embedding vectors, searched by cosine similarity, saved alone or with a
// conversation), MemoryHit, MemorySearch, Conversation.Memory and
// Conversation.Compact (include/weft/c/memory.h). Part of the binding; the
// rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    // One search result: an entry and its cosine similarity to the query.
    public sealed class MemoryHit
    {
        public ulong Id { get; internal set; }
        public float Score { get; internal set; }  // in [-1, 1]
        public string Text { get; internal set; }
        public string Metadata { get; internal set; }

        // A weft_memory_hits list as hits, best first; the list is freed.
        internal static MemoryHit[] Take(MemoryHitsHandle h)
        {
            using (h)
            {
                UIntPtr n;
                Native.Check(Native.weft_memory_hits_count(h, out n));
                var hits = new MemoryHit[Native.Int(n)];
                for (int i = 0; i < hits.Length; ++i)
                {
                    var at = Native.Size(i);
                    ulong id;
                    float score;
                    Native.Check(Native.weft_memory_hits_id(h, at, out id));
                    Native.Check(Native.weft_memory_hits_score(h, at, out score));
                    hits[i] = new MemoryHit
                    {
                        Id = id, Score = score,
                        Text = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                            Native.weft_memory_hits_text(h, at, buf, cap, out len)),
                        Metadata = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                            Native.weft_memory_hits_metadata(h, at, buf, cap, out len)),
                    };
                }
                return hits;
            }
        }
    }

    // A store of memories. Handles name a shared store: the Memory a
    // conversation returns (Conversation.Memory) and the one given to it are
    // the same entries; disposing one drops only that handle. Every member
    // may be called from any thread; none waits for a step.
    public sealed class Memory : IDisposable
    {
        internal readonly MemoryHandle Handle;

        public Memory()
        {
            MemoryHandle h;
            Native.Check(Native.weft_memory_new(out h));
            Handle = h;
        }

        internal Memory(MemoryHandle handle) { Handle = handle; }

        // Adds `text` and queues its embedding on `executor` (made with
        // ExecutorParams.Embedder; a Step loop or the worker must run);
        // returns its id (from 1, never reused). Searches find it once its
        // vector arrives. WeftException as Executor.Embed, Incompatible when
        // the store's vectors came from another embedder.
        public ulong Add(Executor executor, string text, string metadata = null)
        {
            if (executor == null) throw new ArgumentNullException("executor");
            if (text == null) throw new ArgumentNullException("text");
            ulong id;
            Native.Check(Native.weft_memory_add(Handle, executor.Handle, Native.Utf8z(text),
                                                metadata == null ? null : Native.Utf8z(metadata), out id));
            return id;
        }

        // Adds an entry with a vector the caller made (copied). WeftException
        // InvalidArgument for an empty vector or another width than the store's.
        public ulong Add(string text, float[] vector, string metadata = null)
        {
            if (text == null) throw new ArgumentNullException("text");
            if (vector == null) throw new ArgumentNullException("vector");
            ulong id;
            Native.Check(Native.weft_memory_add_vector(Handle, Native.Utf8z(text),
                                                       metadata == null ? null : Native.Utf8z(metadata), vector,
                                                       Native.Size(vector.Length), out id));
            return id;
        }

        // False when there was no entry with that id.
        public bool Remove(ulong id)
        {
            int removed;
            Native.Check(Native.weft_memory_remove(Handle, id, out removed));
            return removed != 0;
        }

        public void Clear() { Native.Check(Native.weft_memory_clear(Handle)); }

        public int Count { get { UIntPtr n; Native.Check(Native.weft_memory_size(Handle, out n)); return Native.Int(n); } }
        // Entries whose embedding is queued; entries without a vector and not queued.
        public int PendingCount
        {
            get { UIntPtr n; Native.Check(Native.weft_memory_pending(Handle, out n)); return Native.Int(n); }
        }
        public int MissingCount
        {
            get { UIntPtr n; Native.Check(Native.weft_memory_missing(Handle, out n)); return Native.Int(n); }
        }
        // The vectors' width (0 while no entry has one).
        public int Dimensions
        {
            get { uint n; Native.Check(Native.weft_memory_dimensions(Handle, out n)); return (int)n; }
        }

        // Queues the embedding of every missing entry; returns how many.
        public int EmbedMissing(Executor executor)
        {
            if (executor == null) throw new ArgumentNullException("executor");
            UIntPtr n;
            Native.Check(Native.weft_memory_embed_missing(Handle, executor.Handle, out n));
            return Native.Int(n);
        }

        // An entry's text, metadata and vector (empty until embedded).
        // WeftException NotFound for an id not in the store.
        public string Text(ulong id)
        {
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_memory_get_text(Handle, id, buf, cap, out len));
        }
        public string Metadata(ulong id)
        {
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_memory_get_metadata(Handle, id, buf, cap, out len));
        }
        public float[] Vector(ulong id)
        {
            return Native.GetArray<float>((float[] buf, UIntPtr cap, out UIntPtr n) =>
                Native.weft_memory_get_vector(Handle, id, buf, cap, out n));
        }

        // The best k entries for `query` (the store's width), best first
        // (equal scores: the older entry first). WeftException
        // InvalidArgument for another width.
        public MemoryHit[] Search(float[] query, int k)
        {
            if (query == null) throw new ArgumentNullException("query");
            if (k < 0) throw new ArgumentOutOfRangeException("k", k, "must be >= 0");
            MemoryHitsHandle h;
            Native.Check(Native.weft_memory_search_vector(Handle, query, Native.Size(query.Length), Native.Size(k), out h));
            return MemoryHit.Take(h);
        }

        // Queues `query`'s embedding on `executor` and returns at once.
        public MemorySearch Search(Executor executor, string query, int k)
        {
            if (executor == null) throw new ArgumentNullException("executor");
            if (query == null) throw new ArgumentNullException("query");
            if (k < 0) throw new ArgumentOutOfRangeException("k", k, "must be >= 0");
            MemorySearchHandle h;
            Native.Check(Native.weft_memory_search(Handle, executor.Handle, Native.Utf8z(query), Native.Size(k), out h));
            return new MemorySearch(h);
        }

        // The store as bytes (queued embeddings saved as missing entries).
        public byte[] Save()
        {
            BytesHandle b;
            Native.Check(Native.weft_memory_save(Handle, out b));
            return Native.TakeBytes(b);
        }

        // WeftException Corrupt for damaged bytes, Incompatible for another version.
        public static Memory Load(byte[] bytes)
        {
            if (bytes == null) throw new ArgumentNullException("bytes");
            MemoryHandle h;
            Native.Check(Native.weft_memory_load(bytes, Native.Size(bytes.Length), out h));
            return new Memory(h);
        }

        public void Dispose() { Handle.Dispose(); }
    }

    // A search whose query is being embedded (Memory.Search with an executor).
    public sealed class MemorySearch : IDisposable
    {
        internal readonly MemorySearchHandle Handle;

        internal MemorySearch(MemorySearchHandle handle) { Handle = handle; }

        // The query is embedded (or its embedding failed: Error).
        public bool IsReady
        {
            get { int r; Native.Check(Native.weft_memory_search_is_ready(Handle, out r)); return r != 0; }
        }

        // Waits until ready or `timeout` passes; someone must step the executor.
        public bool Wait(TimeSpan timeout)
        {
            var ms = (uint)Math.Max(0, Math.Min(uint.MaxValue, timeout.TotalMilliseconds));
            int r;
            Native.Check(Native.weft_memory_search_wait(Handle, ms, out r));
            return r != 0;
        }

        // Why the query's embedding failed; null otherwise.
        public WeftException Error
        {
            get
            {
                Status code = Status.Ok;
                var msg = Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_memory_search_error(Handle, out code, buf, cap, out len));
                return code == Status.Ok ? null : new WeftException(code, msg);
            }
        }

        // The best entries among those embedded now, best first; empty until ready.
        public MemoryHit[] Hits
        {
            get
            {
                MemoryHitsHandle h;
                Native.Check(Native.weft_memory_search_hits(Handle, out h));
                return MemoryHit.Take(h);
            }
        }

        public void Dispose() { Handle.Dispose(); }
    }

    public sealed partial class Conversation
    {
        // The conversation's memory, saved and loaded with it, shared by its
        // forks; null when it has none. Each get returns a new handle to the
        // same store (dispose it); setting null removes it.
        public Memory Memory
        {
            get
            {
                MemoryHandle h;
                Native.Check(Native.weft_conversation_memory(Handle, out h));
                if (h.IsInvalid)
                {
                    h.Dispose();
                    return null;
                }
                return new Memory(h);
            }
            set
            {
                if (value == null) Native.Check(Native.weft_conversation_set_memory_none(Handle, IntPtr.Zero));
                else Native.Check(Native.weft_conversation_set_memory(Handle, value.Handle));
            }
        }

        // The history becomes its first keepFirst tokens, then `summary`
        // (tokenized without BOS), then its last keepLast tokens, exactly as a
        // fresh prompt of that history (the rest is decoded by the next
        // steps). Cancels a running generation. WeftException OutOfRange when
        // keepFirst + keepLast exceed TokenCount or the result exceeds the
        // context; InvalidArgument when an image lies at or past keepFirst.
        public void Compact(int keepFirst, int keepLast, string summary = null)
        {
            if (keepFirst < 0) throw new ArgumentOutOfRangeException("keepFirst", keepFirst, "must be >= 0");
            if (keepLast < 0) throw new ArgumentOutOfRangeException("keepLast", keepLast, "must be >= 0");
            var n = new CompactParamsNative();
            Native.Check(Native.weft_compact_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(CompactParamsNative)))));
            n.keep_first = (uint)keepFirst;
            n.keep_last = (uint)keepLast;
            using (var mem = new CallMemory())
            {
                n.summary = summary == null ? IntPtr.Zero : mem.Utf8z(summary);
                Native.Check(Native.weft_conversation_compact(Handle, ref n));
            }
        }
    }
}
