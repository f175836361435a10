// Weft.Generation.cs — Generation: sampling step by step; poll it, wait
// for it, cancel it (include/weft/c/generation.h). Part of the binding; the
// rules are in Weft.cs.
using System;
using System.Threading;

namespace Weft
{
    // A running generation: poll it, wait for it, cancel it; readable after
    // its conversation is gone.
    // A token and its log-probability (natural log) under the model.
    public struct TokenProb
    {
        public readonly int Token;
        public readonly float Logprob;
        public TokenProb(int token, float logprob) { Token = token; Logprob = logprob; }
    }

    // What GenerateParams.Logprobs records for one sampled token: its
    // log-probability and the most likely tokens then, most likely first.
    public sealed class TokenLogprob
    {
        public readonly int Token;
        public readonly float Logprob;
        public readonly TokenProb[] Top;
        public TokenLogprob(int token, float logprob, TokenProb[] top) { Token = token; Logprob = logprob; Top = top; }
    }

    // The call a reply made: the tool's name and its arguments as JSON text.
    public sealed class ToolCall
    {
        public readonly string Name, Arguments;
        public ToolCall(string name, string arguments) { Name = name; Arguments = arguments; }

        // The call written as the format writes it, to render an earlier
        // turn back into a prompt (weft::tool_call_text).
        public string Text(ToolFormat format = ToolFormat.Hermes)
        {
            var name = Native.Utf8z(Name ?? "");
            var args = Native.Utf8z(Arguments ?? "");
            return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                Native.weft_tool_call_text(name, args, (int)format, buf, cap, out len));
        }
    }

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

        // Speculative decoding so far: draft tokens the steps verified for
        // this generation, and of those the ones kept.
        public int Drafted
        {
            get { uint d, a; Native.Check(Native.weft_generation_drafts(Handle, out d, out a)); return (int)d; }
        }

        public int Accepted
        {
            get { uint d, a; Native.Check(Native.weft_generation_drafts(Handle, out d, out a)); return (int)a; }
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

        // Token `index`'s log-probability record (GenerateParams.Logprobs):
        // WeftException OutOfRange past the records so far. Copies the
        // records so far on every call.
        public TokenLogprob Logprob(int index)
        {
            if (index < 0) throw new ArgumentOutOfRangeException("index", index, "must be >= 0");
            TokenLogprobNative rec;
            var top = new TokenLogprobNative[GenerateParams.MaxTopLogprobs];
            UIntPtr n;
            Native.Check(Native.weft_generation_logprob(Handle, Native.Size(index), out rec, top, Native.Size(top.Length), out n));
            var alts = new TokenProb[Native.Int(n)];
            for (int i = 0; i < alts.Length; ++i) alts[i] = new TokenProb(top[i].token, top[i].logprob);
            return new TokenLogprob(rec.token, rec.logprob, alts);
        }

        // The call a finished generation with tools made, or null (it spoke,
        // was cut, or still runs).
        public ToolCall ToolCall
        {
            get
            {
                for (int attempt = 0; attempt < 4; ++attempt)
                {
                    int has;
                    UIntPtr nameLen, argsLen;
                    var probe = Native.weft_generation_tool_call(Handle, out has, null, UIntPtr.Zero, out nameLen, null, UIntPtr.Zero, out argsLen);
                    if (probe == Status.Ok && has == 0) return null;
                    if (probe != Status.BufferTooSmall) Native.Check(probe);
                    var name = new byte[Native.Int(nameLen) + 1];
                    var args = new byte[Native.Int(argsLen) + 1];
                    var status = Native.weft_generation_tool_call(Handle, out has, name, Native.Size(name.Length), out nameLen, args, Native.Size(args.Length), out argsLen);
                    if (status == Status.BufferTooSmall) continue;
                    Native.Check(status);
                    if (has == 0) return null;
                    return new ToolCall(System.Text.Encoding.UTF8.GetString(name, 0, Native.Int(nameLen)),
                                        System.Text.Encoding.UTF8.GetString(args, 0, Native.Int(argsLen)));
                }
                throw new InvalidOperationException("the tool call kept changing size");
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
