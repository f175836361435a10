// Weft.EventPump.cs — polling events each frame without garbage: reused
// arrays, tokens as ids, text decoded on demand into the caller's buffers.
// Part of the binding; the rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Weft
{
    // One polled event; its text stays in the pump until the next Poll.
    public struct PumpedEvent
    {
        public EventKind Kind;
        public ulong ConversationId;
        public int Token;               // Token: the token; -1 otherwise
        public FinishReason Reason;     // Finished
        public Status ErrorCode;        // Error, Finished with Reason.Error
        internal int TextStart, TextBytes, ErrorStart, ErrorBytes, NameStart, NameBytes;

        // UTF-8 bytes of the text this token released, or of a ToolCall's
        // arguments (0 for other kinds).
        public int TextByteCount { get { return TextBytes; } }
    }

    // Executor.PollEvents without a List and strings per frame: Poll fills
    // arrays kept from frame to frame (grown only when a frame brings more
    // than ever before), so a game's Update allocates nothing once warm.
    // One pump per polling thread (it is not itself thread-safe).
    public sealed class EventPump
    {
        private static readonly UIntPtr EventSize = Native.Size(Marshal.SizeOf(typeof(EventNative)));

        private PumpedEvent[] events;
        private byte[] text;
        private char[] chars;
        private int count, textUsed;

        public EventPump(int eventCapacity = 256, int textCapacity = 4096)
        {
            events = new PumpedEvent[Math.Max(1, eventCapacity)];
            text = new byte[Math.Max(16, textCapacity)];
            chars = new char[Math.Max(16, textCapacity)];
        }

        public int Count { get { return count; } }

        public PumpedEvent this[int i]
        {
            get
            {
                if ((uint)i >= (uint)count) throw new ArgumentOutOfRangeException("i");
                return events[i];
            }
        }

        // Takes up to `max` queued events (0 = all), oldest first, replacing
        // the previous poll's; returns how many. Never waits for a step.
        public int Poll(Executor executor, int max = 0)
        {
            if (executor == null) throw new ArgumentNullException("executor");
            count = 0;
            textUsed = 0;
            IntPtr list;
            Native.Check(Native.weft_executor_poll_events_raw(executor.Handle, Native.Size(max), out list));
            try
            {
                UIntPtr n;
                Native.Check(Native.weft_event_list_count_raw(list, out n));
                int total = Native.Int(n);
                if (total > events.Length) Array.Resize(ref events, Math.Max(total, events.Length * 2));
                var e = new EventNative();
                for (int i = 0; i < total; ++i)
                {
                    e.struct_size = EventSize;
                    Native.Check(Native.weft_event_list_get_raw(list, Native.Size(i), ref e));
                    var p = new PumpedEvent
                    {
                        Kind = (EventKind)e.kind, ConversationId = e.conversation, Token = e.token,
                        Reason = (FinishReason)e.reason, ErrorCode = (Status)e.error_code,
                    };
                    p.TextBytes = Native.Int(e.text_len);
                    p.TextStart = Append(e.text, p.TextBytes);
                    if (e.kind == (int)EventKind.ToolCall && e.tool_name != IntPtr.Zero)
                    {
                        p.NameBytes = Strlen(e.tool_name);
                        p.NameStart = Append(e.tool_name, p.NameBytes);
                    }
                    if (e.error_code != 0 && e.error_message != IntPtr.Zero)
                    {
                        p.ErrorBytes = Strlen(e.error_message);
                        p.ErrorStart = Append(e.error_message, p.ErrorBytes);
                    }
                    events[i] = p;
                    count = i + 1;
                }
            }
            finally
            {
                Native.weft_event_list_free(list);
            }
            return count;
        }

        // Appends event i's text to `sb` (no allocation while sb has room).
        public int AppendText(int i, StringBuilder sb)
        {
            var e = this[i];
            int n = Decode(e.TextStart, e.TextBytes);
            sb.Append(chars, 0, n);
            return n;
        }

        // Copies event i's text as UTF-16 into dest at index; returns the
        // chars written. dest needs TextByteCount chars of room at most.
        public int CopyText(int i, char[] dest, int index)
        {
            var e = this[i];
            if (dest == null) throw new ArgumentNullException("dest");
            if (index < 0 || dest.Length - index < e.TextBytes) throw new ArgumentOutOfRangeException("index");
            return DecodeUtf8(text, e.TextStart, e.TextBytes, dest, index);
        }

        // Event i's text as a new string: allocates, for when one is wanted.
        public string Text(int i)
        {
            var e = this[i];
            return new string(chars, 0, Decode(e.TextStart, e.TextBytes));
        }

        public string ErrorMessage(int i)
        {
            var e = this[i];
            return new string(chars, 0, Decode(e.ErrorStart, e.ErrorBytes));
        }

        // A ToolCall event's tool name ("" for other kinds); its arguments are Text(i).
        public string ToolName(int i)
        {
            var e = this[i];
            return new string(chars, 0, Decode(e.NameStart, e.NameBytes));
        }

        private int Decode(int start, int bytes)
        {
            if (bytes > chars.Length) chars = new char[Math.Max(bytes, chars.Length * 2)];
            return DecodeUtf8(text, start, bytes, chars, 0);
        }

        // UTF-8 to UTF-16 by hand: token text from a model can hold invalid
        // bytes, and the framework's decoder allocates a fallback buffer for
        // each invalid sequence. Each invalid sequence becomes one U+FFFD.
        // Writes at most `count` chars.
        internal static int DecodeUtf8(byte[] src, int start, int count, char[] dst, int at)
        {
            int i = start, end = start + count, o = at;
            while (i < end)
            {
                int b = src[i];
                if (b < 0x80) { dst[o++] = (char)b; ++i; continue; }
                int need, cp, min;
                if ((b & 0xE0) == 0xC0) { need = 1; cp = b & 0x1F; min = 0x80; }
                else if ((b & 0xF0) == 0xE0) { need = 2; cp = b & 0x0F; min = 0x800; }
                else if ((b & 0xF8) == 0xF0) { need = 3; cp = b & 0x07; min = 0x10000; }
                else { dst[o++] = '\uFFFD'; ++i; continue; }
                int j = 1;
                for (; j <= need && i + j < end && (src[i + j] & 0xC0) == 0x80; ++j) cp = (cp << 6) | (src[i + j] & 0x3F);
                if (j <= need) { dst[o++] = '\uFFFD'; i += j; continue; }  // cut short
                i += need + 1;
                if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { dst[o++] = '\uFFFD'; continue; }
                if (cp >= 0x10000)
                {
                    cp -= 0x10000;
                    dst[o++] = (char)(0xD800 + (cp >> 10));
                    dst[o++] = (char)(0xDC00 + (cp & 0x3FF));
                }
                else dst[o++] = (char)cp;
            }
            return o - at;
        }

        private int Append(IntPtr p, int n)
        {
            int start = textUsed;
            if (n == 0 || p == IntPtr.Zero) return start;
            if (textUsed + n > text.Length) Array.Resize(ref text, Math.Max(textUsed + n, text.Length * 2));
            Marshal.Copy(p, text, textUsed, n);
            textUsed += n;
            return start;
        }

        private static int Strlen(IntPtr p)
        {
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0) ++n;
            return n;
        }
    }
}
