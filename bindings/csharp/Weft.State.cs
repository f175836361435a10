// Weft.State.cs — saving and loading (include/weft/c/state.h): a
// Conversation as bytes or a file, SaveAsync, residency and parking hints;
// an Executor's Load, SaveAll and LoadAll. Part of the binding; the rules
// are in Weft.cs.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading.Tasks;

namespace Weft
{
    public sealed partial class Conversation
    {
        // The whole conversation as bytes (Executor.Load brings it back). One
        // of the few calls that wait for a running step (the KV data is read
        // at a step boundary): on a game's main thread, use SaveAsync.
        public byte[] Save()
        {
            BytesHandle b;
            Native.Check(Native.weft_conversation_save(Handle, out b));
            return Native.TakeBytes(b);
        }

        // Tokens only (no KV data, no logits): the smallest state; Load
        // decodes the history again, sharing what the cache holds of it.
        public byte[] SaveTokens()
        {
            BytesHandle b;
            Native.Check(Native.weft_conversation_save_tokens(Handle, out b));
            return Native.TakeBytes(b);
        }

        // Written atomically: a failure leaves the previous file intact. Waits
        // for a running step, as Save() does.
        public void Save(string path) { Native.Check(Native.weft_conversation_save_file(Handle, Native.Utf8z(path))); }

        // Save() without waiting for a running step: the task gets the same
        // bytes, taken at a step boundary: at once when nobody else steps (no
        // step in progress, no worker: the task is complete when this
        // returns), else on the stepping thread at its next boundary (the
        // end of the running step, or the worker's next step). Its continuations never run
        // on weft's thread (they are queued to the thread pool, or to
        // Unity's synchronization context under await). A conversation
        // already disposed in weft throws WeftException (Status.Disposed)
        // here; one disposed before the boundary, or whose Executor is
        // disposed first, faults the task with that WeftException.
        public Task<byte[]> SaveAsync()
        {
            var pending = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
            var ud = Trampolines.Pin(pending);  // weft calls back exactly once, which frees it
            Status status;
            try
            {
                status = Native.weft_conversation_save_async(Handle, Trampolines.Saved, ud);
            }
            catch
            {
                Trampolines.Unpin(ud);  // a disposed handle: weft was never called
                throw;
            }
            if (status != Status.Ok)
            {
                Trampolines.Unpin(ud);  // on failure weft never calls back: user_data stays ours
                Native.Check(status);
            }
            return pending.Task;
        }

        // Where its KV data is now (a Park asked for while the worker runs
        // shows from its next step boundary on).
        public Residency Residency
        {
            get { int r; Native.Check(Native.weft_conversation_residency(Handle, out r)); return (Residency)r; }
        }

        // Moves it out of the cache (a hint: it is restored when it next
        // runs). Never waits: when nobody else steps it parks at once and
        // returns false when no parking tier could take it; else it parks at
        // the stepper's next boundary and returns whether a tier is set up.
        public bool Park()
        {
            int parked;
            Native.Check(Native.weft_conversation_park(Handle, out parked));
            return parked != 0;
        }

        // Asks the next step to make it resident before it has input. Never waits.
        public void Prefetch() { Native.Check(Native.weft_conversation_prefetch(Handle)); }
    }

    public sealed partial class Executor
    {
        // A conversation saved by Conversation.Save (any executor of the same
        // model): history, queue, logits, sampler state and a running
        // generation (without its callback) come back. Corrupt or foreign
        // state throws (Status.Corrupt, Incompatible) and changes nothing.
        // Never waits for a running step (its KV data goes in at once when
        // nobody else steps, else at the stepper's next boundary).
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

        // Every conversation, resident and parked, with its Id. Waits for a
        // running step, as Conversation.Save does.
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
    }
}
