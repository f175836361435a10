// Weft.Model.Async.cs — Model.LoadAsync: a load that never blocks the
// calling (main) thread. Part of the binding; the rules are in Weft.cs.
using System;
using System.Threading;
using System.Threading.Tasks;

namespace Weft
{
    public sealed partial class Model
    {
        // Loads on a thread of its own and completes the task through the
        // caller's SynchronizationContext when it has one (Unity's main
        // thread, where `task.IsCompleted` then turns true between frames),
        // else on the loading thread. Cancelling `cancel` stops the load at
        // its next progress report (Task canceled, nothing leaked); a model
        // finished after the cancel, or whose completion the context never
        // runs (a domain reload), is disposed, not handed out. p.OnProgress,
        // when set, runs on the loading thread. Failures fault the task with
        // WeftException, as Load throws.
        public static Task<Model> LoadAsync(string path, ModelParams p = null,
                                            CancellationToken cancel = default(CancellationToken))
        {
            if (path == null) throw new ArgumentNullException("path");
            var load = new PendingLoad(path, p ?? new ModelParams(), cancel, SynchronizationContext.Current);
            load.Begin();
            return load.Task;
        }
    }

    // One LoadAsync in flight: its thread, its outcome, and what Shutdown
    // needs to stop it (Abort, then Join).
    internal sealed class PendingLoad
    {
        private static readonly SendOrPostCallback CompleteCallback = Complete;

        private readonly string path;
        private readonly ModelParams user;
        private readonly CancellationToken cancel;
        private readonly SynchronizationContext context;
        private readonly TaskCompletionSource<Model> tcs =
            new TaskCompletionSource<Model>(TaskCreationOptions.RunContinuationsAsynchronously);
        private Thread thread;
        private volatile bool aborted;
        private Model result;
        private Exception error;

        internal PendingLoad(string path, ModelParams user, CancellationToken cancel, SynchronizationContext context)
        {
            this.path = path;
            this.user = user;
            this.cancel = cancel;
            this.context = context;
        }

        internal Task<Model> Task { get { return tcs.Task; } }

        internal void Begin()
        {
            if (cancel.IsCancellationRequested)
            {
                tcs.TrySetCanceled();
                return;
            }
            lock (Live.Gate) Live.Loads.Add(this);
            thread = new Thread(Run) { IsBackground = true, Name = "weft Model.LoadAsync" };
            thread.Start();
        }

        // Shutdown: stop at the next progress report, and never hand out the model.
        internal void Abort() { aborted = true; }

        internal void Join()
        {
            var t = thread;
            if (t != null && t != Thread.CurrentThread) t.Join();
        }

        private bool Wanted { get { return !aborted && !cancel.IsCancellationRequested; } }

        private bool Progress(float f)
        {
            if (!Wanted) return false;
            return user.OnProgress == null || user.OnProgress(f);
        }

        private void Run()
        {
            try
            {
                var p = new ModelParams
                {
                    GpuLayers = user.GpuLayers, UseMmap = user.UseMmap, VocabOnly = user.VocabOnly, Rpc = user.Rpc,
                    RpcTimeoutMs = user.RpcTimeoutMs, RpcReplyTimeoutMs = user.RpcReplyTimeoutMs, OnProgress = Progress,
                };
                result = Model.Load(path, p);
            }
            catch (Exception e)
            {
                error = e;
            }
            finally
            {
                lock (Live.Gate) Live.Loads.Remove(this);
            }
            if (context != null && !aborted)
            {
                try
                {
                    context.Post(CompleteCallback, this);
                    return;
                }
                catch (Exception) { /* a context that refuses posts: complete here */ }
            }
            Complete(this);
        }

        private static void Complete(object state)
        {
            var l = (PendingLoad)state;
            if (l.result != null && !l.Wanted)
            {
                l.result.Dispose();
                l.result = null;
                l.error = null;
            }
            if (l.result != null) l.tcs.TrySetResult(l.result);
            else if (!l.Wanted) l.tcs.TrySetCanceled();
            else
            {
                var w = l.error as WeftException;
                if (w != null && w.Code == Status.Cancelled) l.tcs.TrySetCanceled();  // OnProgress said stop
                else l.tcs.TrySetException(l.error ?? new WeftException(Status.Internal, "model load failed"));
            }
        }
    }
}
