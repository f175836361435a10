// Weft.Native.Callbacks.cs — native memory for the length of one call, and
// the static trampolines every callback goes through. Part of the P/Invoke
// layer (Weft.Native.cs).
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;

#if UNITY_5_3_OR_NEWER
using MonoPInvokeCallbackAttribute = AOT.MonoPInvokeCallbackAttribute;
#endif

namespace Weft
{
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

        public IntPtr Ints(int[] items)
        {
            var p = Marshal.AllocHGlobal(sizeof(int) * Math.Max(1, items.Length));
            blocks.Add(p);
            Marshal.Copy(items, 0, p, items.Length);
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
        public Action<FinishReason> OnFinish;
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
        private static readonly FinishFn FinishDelegate = OnFinish;
        private static readonly SaveFn SaveDelegate = OnSaved;

        public static readonly IntPtr Free = Marshal.GetFunctionPointerForDelegate(FreeDelegate);
        public static readonly IntPtr Log = Marshal.GetFunctionPointerForDelegate(LogDelegate);
        public static readonly IntPtr Progress = Marshal.GetFunctionPointerForDelegate(ProgressDelegate);
        public static readonly IntPtr Pressure = Marshal.GetFunctionPointerForDelegate(PressureDelegate);
        public static readonly IntPtr Token = Marshal.GetFunctionPointerForDelegate(TokenDelegate);
        public static readonly IntPtr Finish = Marshal.GetFunctionPointerForDelegate(FinishDelegate);
        public static readonly IntPtr Saved = Marshal.GetFunctionPointerForDelegate(SaveDelegate);

        // save_async callbacks so far (the samples check one per SaveAsync).
        private static int savedCalls;
        internal static int SavedCalls { get { return Interlocked.CompareExchange(ref savedCalls, 0, 0); } }

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

        [MonoPInvokeCallback(typeof(FinishFn))]
        private static void OnFinish(int reason, IntPtr userData)
        {
            TokenSink sink = null;
            try
            {
                sink = (TokenSink)GCHandle.FromIntPtr(userData).Target;
                sink.OnFinish((FinishReason)reason);
            }
            catch (Exception e)
            {
                if (sink != null && sink.Error == null) sink.Error = e;
            }
        }

        // weft_conversation_save_async's outcome, exactly once per call: on
        // the stepping thread at a step boundary, under the executor's lock
        // (so only weft_bytes_* may be called here), or inside SaveAsync
        // when nobody else steps. The task's continuations run elsewhere
        // (RunContinuationsAsynchronously), never on this thread.
        [MonoPInvokeCallback(typeof(SaveFn))]
        private static void OnSaved(Status status, IntPtr bytes, IntPtr message, IntPtr userData)
        {
            TaskCompletionSource<byte[]> pending = null;
            BytesHandle owned = null;  // freed whatever happens
            try
            {
                if (status == Status.Ok) owned = new BytesHandle(bytes);
                Interlocked.Increment(ref savedCalls);
                var handle = GCHandle.FromIntPtr(userData);
                pending = (TaskCompletionSource<byte[]>)handle.Target;
                handle.Free();  // weft will not call again for this save
                if (owned != null) pending.TrySetResult(Native.TakeBytes(owned));
                else pending.TrySetException(new WeftException(status, Native.Utf8z(message)));
            }
            catch (Exception e)
            {
                if (pending != null) pending.TrySetException(e);
            }
            finally
            {
                if (owned != null) owned.Dispose();
            }
        }
    }
}
