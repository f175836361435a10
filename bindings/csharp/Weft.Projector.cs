// Weft.Projector.cs — images in conversations (include/weft/c/projector.h):
// Projector (Projector.Load, ExecutorParams.Projector), a Conversation's
// PromptImage and Images. Part of the binding; the rules are in Weft.cs.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    public sealed class ProjectorParams
    {
        // CPU threads of the image encoder (its own thread per executor,
        // beside the decode threads). Default 1; >= 1.
        public int Threads = 1;
        // Run the encoder on a GPU backend when weft has one. Default false.
        public bool UseGpu;
    }

    // A vision projector (mmproj GGUF) for a text model: immutable, shared by
    // any number of executors and threads. It keeps its model's weights
    // alive, and an executor keeps the projector it was made with, so this
    // may be disposed once the executors exist.
    public sealed class Projector : IDisposable
    {
        internal readonly ProjectorHandle Handle;

        private Projector(ProjectorHandle handle) { Handle = handle; Live.Add(Live.Projectors, this); }

        // Status.NotFound (no such file), InvalidArgument (Threads < 1, weft
        // built without mtmd), Incompatible (not a projector, or made for
        // another model's width).
        public static Projector Load(Model model, string path, ProjectorParams p = null)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (path == null) throw new ArgumentNullException("path");
            p = p ?? new ProjectorParams();
            var n = new ProjectorParamsNative();
            Native.Check(Native.weft_projector_params_init(ref n, Native.Size(Marshal.SizeOf(typeof(ProjectorParamsNative)))));
            n.n_threads = p.Threads;
            n.use_gpu = p.UseGpu ? 1 : 0;
            ProjectorHandle h;
            Status status;
            using (var mem = new CallMemory())
            {
                n.path = mem.Utf8z(path);
                status = Native.weft_projector_load(model.Handle, ref n, out h);
            }
            Native.Check(status);
            return new Projector(h);
        }

        // Images decode with M-RoPE positions (Qwen2-VL style: a grid's
        // cells share one position and advance by max(width, height)).
        public bool MRope
        {
            get { int v; Native.Check(Native.weft_projector_mrope(Handle, out v)); return v != 0; }
        }

        // The marker that stands for an image in text given to
        // Conversation.Prompt(text, images): "<__media__>".
        public static string MediaMarker
        {
            get { return Marshal.PtrToStringAnsi(Native.weft_media_marker()); }
        }

        // It takes images (PromptImage).
        public bool Vision
        {
            get { int v; Native.Check(Native.weft_projector_vision(Handle, out v)); return v != 0; }
        }

        // It takes audio (PromptAudio), at this sample rate (Hz; 0 without).
        public bool Audio
        {
            get { int v, rate; Native.Check(Native.weft_projector_audio(Handle, out v, out rate)); return v != 0; }
        }
        public int AudioSampleRate
        {
            get { int v, rate; Native.Check(Native.weft_projector_audio(Handle, out v, out rate)); return rate; }
        }

        // Attention inside an image is not causal (Gemma 3 style).
        public bool NonCausal
        {
            get { int v; Native.Check(Native.weft_projector_non_causal(Handle, out v)); return v != 0; }
        }

        // The costly part of PromptImage — the file's decode, the resize — on
        // the calling thread (a worker thread of the game's), so that queueing
        // the result later costs microseconds. The same checks and errors as
        // PromptImage.
        public PreparedImage Prepare(byte[] file)
        {
            if (file == null) throw new ArgumentNullException("file");
            PreparedImageHandle h;
            Native.Check(Native.weft_projector_prepare_image(Handle, file, Native.Size(file.Length), out h));
            return new PreparedImage(h);
        }

        public PreparedImage Prepare(int width, int height, byte[] rgb)
        {
            if (rgb == null) throw new ArgumentNullException("rgb");
            if (width < 0) throw new ArgumentOutOfRangeException("width", width, "must be >= 0");
            if (height < 0) throw new ArgumentOutOfRangeException("height", height, "must be >= 0");
            PreparedImageHandle h;
            Native.Check(Native.weft_projector_prepare_image_rgb(Handle, (uint)width, (uint)height, rgb,
                                                                 Native.Size(rgb.Length), out h));
            return new PreparedImage(h);
        }

        public void Dispose() { Handle.Dispose(); }
    }

    // An image decoded and preprocessed for one projector (Projector.Prepare):
    // immutable, queued any number of times by any thread; a conversation keeps
    // what it needs, so this may be disposed once queued.
    public sealed class PreparedImage : IDisposable
    {
        internal readonly PreparedImageHandle Handle;

        internal PreparedImage(PreparedImageHandle handle) { Handle = handle; }

        // Positions the image itself takes (without the text around it).
        public int TokenCount
        {
            get { uint n; Native.Check(Native.weft_prepared_image_n_tokens(Handle, out n)); return (int)n; }
        }

        public void Dispose() { Handle.Dispose(); }
    }

    // An image of a conversation: each of its positions in Tokens holds
    // Conversation.ImageToken(Id), a negative value.
    public struct ImageSpan
    {
        public ulong Id;        // executor-unique, never reused
        public int Begin;       // its first position
        public int TokenCount;  // positions (and KV cells) it takes
        public int PosCount;    // positions RoPE advances by (TokenCount unless M-RoPE)
        public bool Encoded;    // its embeddings are ready
        public bool Audio;      // a clip of audio (PromptAudio), not an image
    }

    // What one Executor.EncodeImages call did.
    public struct EncodeResult
    {
        public int Images;   // encoded (failed ones included)
        public int Failed;   // of which failed: each its conversation's Error
        public int Pending;  // queued or being encoded by others when it returned
        public double Seconds;
    }

    public sealed partial class Executor
    {
        // Runs the encoder on up to `maxImages` queued images, oldest first,
        // on this thread, now (milliseconds of CPU each): with
        // ImageEncoding.Caller nothing else encodes them. Never waits for a
        // step and no step waits for it (a step meanwhile shares the cores);
        // a projector encodes one image at a time, so it may wait for an
        // encode another thread runs. Encoder failures are the
        // conversation's Error. Returns at once when nothing is queued.
        public EncodeResult EncodeImages(int maxImages = 1)
        {
            if (maxImages < 0) throw new ArgumentOutOfRangeException("maxImages", maxImages, "must be >= 0");
            var r = new EncodeResultNative { struct_size = Native.Size(Marshal.SizeOf(typeof(EncodeResultNative))) };
            Native.Check(Native.weft_executor_encode_images(Handle, (uint)maxImages, ref r));
            return new EncodeResult { Images = (int)r.images, Failed = (int)r.failed, Pending = (int)r.pending, Seconds = r.seconds };
        }
    }

    public sealed partial class Conversation
    {
        // Queues an image: a PNG or JPEG file's bytes. It becomes the text
        // the projector wraps an image in and one span of positions (Images);
        // the vision encoder runs on the executor's encoder thread, never in
        // Step, and until then this conversation's later input waits while
        // others go on. The file is decoded on the calling thread; never
        // waits for a step. Status.InvalidArgument (no projector, not a PNG
        // or JPEG, a generation running), OutOfRange (over 8192 per side or
        // 2^25 pixels, or n_ctx), Corrupt (bytes that do not decode),
        // Incompatible (an M-RoPE grid other than Qwen2-VL's). An encoder failure later is
        // this conversation's Error.
        public void PromptImage(byte[] file)
        {
            if (file == null) throw new ArgumentNullException("file");
            Native.Check(Native.weft_conversation_prompt_image(Handle, file, Native.Size(file.Length)));
        }

        // Raw RGB: width x height x 3 bytes, rows top to bottom.
        public void PromptImage(int width, int height, byte[] rgb)
        {
            if (rgb == null) throw new ArgumentNullException("rgb");
            if (width < 0) throw new ArgumentOutOfRangeException("width", width, "must be >= 0");
            if (height < 0) throw new ArgumentOutOfRangeException("height", height, "must be >= 0");
            Native.Check(Native.weft_conversation_prompt_image_rgb(Handle, (uint)width, (uint)height, rgb,
                                                                   Native.Size(rgb.Length)));
        }

        // An image made by Projector.Prepare (on any thread): microseconds.
        // Status.InvalidArgument when prepared with another projector than the
        // executor's.
        public void PromptImage(PreparedImage image)
        {
            if (image == null) throw new ArgumentNullException("image");
            Native.Check(Native.weft_conversation_prompt_prepared_image(Handle, image.Handle));
        }

        // Text with media markers (Projector.MediaMarker, "<__media__>"), each
        // replaced in order by the next of `images`, as mtmd tokenizes it;
        // all of it queued or none. Status.InvalidArgument when markers and
        // images differ in number. Never waits for a step.
        public void Prompt(string text, PreparedImage[] images, bool addBos = false, bool parseSpecial = false)
        {
            if (text == null) throw new ArgumentNullException("text");
            if (images == null) throw new ArgumentNullException("images");
            var utf8 = Native.Utf8(text);
            var ptrs = new IntPtr[images.Length];
            var refs = new bool[images.Length];
            try
            {
                for (int i = 0; i < images.Length; ++i)
                {
                    if (images[i] == null) throw new ArgumentNullException("images[" + i + "]");
                    // Held for the call: a concurrent Dispose cannot free it under us.
                    images[i].Handle.DangerousAddRef(ref refs[i]);
                    ptrs[i] = images[i].Handle.DangerousGetHandle();
                }
                Native.Check(Native.weft_conversation_prompt_text_with_images(Handle, utf8, Native.Size(utf8.Length),
                    ptrs, Native.Size(ptrs.Length), Model.TextFlags(addBos, parseSpecial)));
            }
            finally
            {
                for (int i = 0; i < images.Length; ++i)
                    if (refs[i]) images[i].Handle.DangerousRelease();
            }
        }

        // Queues a clip of audio: mono samples in [-1, 1] at the projector's
        // AudioSampleRate, encoded and decoded as an image is (one span of
        // Images, Audio set). Status.Incompatible (the projector takes no
        // audio), InvalidArgument (no samples, one not finite), OutOfRange
        // (over 2^24 samples, or n_ctx). Never waits for a step.
        public void PromptAudio(float[] samples)
        {
            if (samples == null) throw new ArgumentNullException("samples");
            Native.Check(Native.weft_conversation_prompt_audio(Handle, samples, Native.Size(samples.Length)));
        }

        // Its images and audio clips, queued and decoded, by position.
        public ImageSpan[] Images
        {
            get
            {
                UIntPtr count;
                Native.Check(Native.weft_conversation_n_images(Handle, out count));
                var result = new ImageSpan[Native.Int(count)];
                int got = 0;
                for (; got < result.Length; ++got)
                {
                    var s = new ImageSpanNative { struct_size = Native.Size(Marshal.SizeOf(typeof(ImageSpanNative))) };
                    // An image may go between the two calls (a rewind on another thread).
                    if (Native.weft_conversation_image(Handle, Native.Size(got), ref s) == Status.OutOfRange) break;
                    result[got] = new ImageSpan { Id = s.id, Begin = (int)s.begin, TokenCount = (int)s.n_tokens,
                                                  PosCount = (int)s.n_pos, Encoded = s.encoded != 0,
                                                  Audio = s.audio != 0 };
                }
                if (got < result.Length) Array.Resize(ref result, got);
                return result;
            }
        }

        // The value an image's positions hold in Tokens.
        public static int ImageToken(ulong id) { return Native.weft_image_token(id); }
    }
}
