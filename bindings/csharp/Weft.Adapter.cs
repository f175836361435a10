// Weft.Adapter.cs — LoRA adapters and control vectors
// (include/weft/c/adapter.h): Adapter (Model.LoadAdapter), AdapterUse, and
// a Conversation's setting (SetAdapters, Adapters). Part of the binding; the
// rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    // A loaded LoRA adapter or control vector: immutable, shared by any
    // number of conversations and threads. It keeps its model's weights
    // alive, so the Model may be disposed first; a conversation keeps the
    // adapters it was set with, so this may be disposed while they use it.
    public sealed class Adapter : IDisposable
    {
        internal readonly AdapterHandle Handle;

        internal Adapter(AdapterHandle handle) { Handle = handle; Live.Add(Live.Adapters, this); }

        public AdapterKind Kind
        {
            get { int k; Native.Check(Native.weft_adapter_get_kind(Handle, out k)); return (AdapterKind)k; }
        }

        // general.name when the file has one, else the file name.
        public string Name
        {
            get
            {
                return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_adapter_name(Handle, buf, cap, out len));
            }
        }

        // The file it was loaded from.
        public string Path
        {
            get
            {
                return Native.GetText((byte[] buf, UIntPtr cap, out UIntPtr len) =>
                    Native.weft_adapter_path(Handle, buf, cap, out len));
            }
        }

        // Identity of the file's contents: two loads of one file agree (saved
        // states name adapters by it).
        public ulong Fingerprint
        {
            get { ulong f; Native.Check(Native.weft_adapter_fingerprint(Handle, out f)); return f; }
        }

        // Control vectors: the highest layer with a direction (layers run 1 ..
        // LayerCount - 1 of the model). 0 for a LoRA.
        public int LayerCount
        {
            get { int n; Native.Check(Native.weft_adapter_n_layers(Handle, out n)); return n; }
        }

        public static string KindName(AdapterKind kind) { return Native.Utf8z(Native.weft_adapter_kind_name((int)kind)); }

        public void Dispose() { Handle.Dispose(); }
    }

    // One adapter of a conversation's setting, with how strongly it applies.
    // Make one with the constructor: default(AdapterUse) has no adapter and
    // a scale of 0.
    public struct AdapterUse
    {
        public Adapter Adapter;
        // Finite. LoRA: llama.cpp's scale for its delta; control vector: the
        // direction's multiplier. 0 is as if absent.
        public float Scale;
        // Control vectors only: the layers it is added to, both inclusive,
        // within [1, layers - 1]; -1 = from layer 1 / to the last layer. Stay
        // -1 for a LoRA.
        public int LayerStart, LayerEnd;

        public AdapterUse(Adapter adapter, float scale = 1f, int layerStart = -1, int layerEnd = -1)
        {
            Adapter = adapter;
            Scale = scale;
            LayerStart = layerStart;
            LayerEnd = layerEnd;
        }
    }

    public sealed partial class Conversation
    {
        // The adapters its tokens decode under from now on (queued input
        // included); none = the base model. What was decoded before keeps
        // its KV. A Fork inherits the setting; Save/Load carry it. Never
        // waits for a step. Status.InvalidArgument for an adapter of another
        // Model (load it with this executor's), a scale that is not finite,
        // a layer range outside [1, layers - 1] or set on a LoRA, an adapter
        // listed twice; the setting is then unchanged.
        public void SetAdapters(params AdapterUse[] uses)
        {
            uses = uses ?? new AdapterUse[0];
            var n = new AdapterUseNative[uses.Length];
            var refs = new bool[uses.Length];
            try
            {
                for (int i = 0; i < uses.Length; ++i)
                {
                    if (uses[i].Adapter == null) throw new ArgumentNullException("uses[" + i + "].Adapter");
                    n[i] = Defaults();
                    // Held for the call: a concurrent Dispose cannot free it
                    // under us (ObjectDisposedException if it is gone already).
                    uses[i].Adapter.Handle.DangerousAddRef(ref refs[i]);
                    n[i].adapter = uses[i].Adapter.Handle.DangerousGetHandle();
                    n[i].scale = uses[i].Scale;
                    n[i].layer_start = uses[i].LayerStart;
                    n[i].layer_end = uses[i].LayerEnd;
                }
                Native.Check(Native.weft_conversation_set_adapters(Handle, n.Length > 0 ? n : null, Native.Size(n.Length)));
            }
            finally
            {
                for (int i = 0; i < uses.Length; ++i)
                {
                    if (refs[i]) uses[i].Adapter.Handle.DangerousRelease();
                }
            }
        }

        // The setting as last set, in its order (layer ranges resolved: -1
        // becomes the layer; a LoRA's stay -1). Each Adapter is a new one
        // (equal Fingerprint to the one set): dispose it when done.
        public AdapterUse[] Adapters
        {
            get
            {
                UIntPtr count;
                var status = Native.weft_conversation_adapters(Handle, null, UIntPtr.Zero, out count);
                for (int attempt = 0; status == Status.BufferTooSmall && attempt < 16; ++attempt)
                {
                    var buf = new AdapterUseNative[Native.Int(count)];
                    for (int i = 0; i < buf.Length; ++i) buf[i] = Defaults();
                    status = Native.weft_conversation_adapters(Handle, buf, Native.Size(buf.Length), out count);
                    if (status != Status.Ok) continue;  // it grew in between: again
                    var result = new AdapterUse[Native.Int(count)];
                    for (int i = 0; i < result.Length; ++i)
                    {
                        result[i] = new AdapterUse(new Adapter(new AdapterHandle(buf[i].adapter)), buf[i].scale,
                                                   buf[i].layer_start, buf[i].layer_end);
                    }
                    return result;
                }
                Native.Check(status);
                return new AdapterUse[0];
            }
        }

        private static AdapterUseNative Defaults()
        {
            var u = new AdapterUseNative();
            Native.Check(Native.weft_adapter_use_init(ref u, Native.Size(Marshal.SizeOf(typeof(AdapterUseNative)))));
            return u;
        }
    }
}
