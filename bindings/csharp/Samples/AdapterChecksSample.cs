// The adapter API's contract from C#: accessors, every refusal as a
// WeftException code (the setting then unchanged), ArgumentNullException and
// ObjectDisposedException on the C# side, reading the setting back and
// clearing it, a fork inheriting it, and lifetimes: the Model disposed
// before its adapters, an Adapter disposed while a conversation decodes
// under it.
using System;
using Weft;

namespace Weft.Samples
{
    internal static class AdapterChecksSample
    {
        public static void Run(string modelPath)
        {
            string loraPath, cvecPath;
            if (!AdapterSample.FindFiles(modelPath, out loraPath, out cvecPath)) return;
            Adapter lora, cvec;
            float[] expected;
            Executor ex;
            Conversation c;
            using (var model = Model.Load(modelPath))
            {
                lora = model.LoadAdapter(loraPath);
                cvec = model.LoadAdapter(cvecPath);
                Check.Equal(AdapterKind.Lora, lora.Kind, "LoRA kind");
                Check.Equal(AdapterKind.ControlVector, cvec.Kind, "control vector kind");
                Check.Equal("control_vector", Adapter.KindName(AdapterKind.ControlVector), "kind name");
                Check.Equal(loraPath, lora.Path, "path");
                Check.Equal(0, lora.LayerCount, "a LoRA has no layer count");
                Check.True(cvec.LayerCount >= 1 && cvec.LayerCount < model.Info.LayerCount, "control vector layers");
                using (var again = model.LoadAdapter(loraPath))
                    Check.Equal(lora.Fingerprint, again.Fingerprint, "the same file, the same fingerprint");

                Check.Throws(Status.NotFound, "does not exist", () => model.LoadAdapter("/nonexistent.gguf"), "missing file");
                Check.Throws(Status.InvalidArgument, "neither", () => model.LoadAdapter(modelPath), "a model is no adapter");
                Check.Throws<ArgumentNullException>(() => model.LoadAdapter(null), "null path");

                var tokens = model.Tokenize("The smith of Eldermoor said", addBos: true);
                expected = AdapterSample.Alone(model, tokens, new AdapterUse(lora), new AdapterUse(cvec, 0.5f));
                ex = new Executor(model, AdapterSample.NewParams());
                c = ex.CreateConversation();
                c.SetAdapters(new AdapterUse(lora, 0.25f));
                Refusals(model, modelPath, lora, cvec, ex, c);
                Check.Equal(1, c.Adapters.Length, "refusals left the setting as it was");

                c.SetAdapters(new AdapterUse(lora), new AdapterUse(cvec, 0.5f));
                var back = c.Adapters;
                Check.Equal(2, back.Length, "two adapters set");
                Check.Equal(-1, back[0].LayerStart, "a LoRA's range stays -1");
                Check.Equal(1, back[1].LayerStart, "a control vector's range comes resolved");
                Check.Equal(cvec.Fingerprint, back[1].Adapter.Fingerprint, "the same adapter, a new handle");
                foreach (var u in back) u.Adapter.Dispose();
                using (var d = ex.CreateConversation())
                {
                    d.SetAdapters(new AdapterUse(cvec));
                    d.SetAdapters();
                    Check.Equal(0, d.Adapters.Length, "SetAdapters() clears");
                }
                c.Prompt(tokens);
            }
            // The Model is gone, and now the adapters' handles: the
            // conversation still decodes under them.
            lora.Dispose();
            cvec.Dispose();
            Check.Throws<ObjectDisposedException>(() => c.SetAdapters(new AdapterUse(lora)), "a disposed adapter");
            while (!ex.Step().Idle) { }
            Check.SameLogits(expected, c.GetLogits(), "decoded after the model and adapters were disposed");
            using (var fork = c.Fork())
            {
                var inherited = fork.Adapters;
                Check.Equal(2, inherited.Length, "a fork inherits the setting");
                foreach (var u in inherited) u.Adapter.Dispose();
            }
            var s = ex.Stats;
            Check.True(s.AdapterSwitches >= 0 && s.AdapterSwitchMs >= 0, "adapter stats");
            c.Dispose();
            ex.Dispose();
        }

        private static void Refusals(Model model, string modelPath, Adapter lora, Adapter cvec, Executor ex, Conversation c)
        {
            Check.Throws(Status.InvalidArgument, "not finite", () => c.SetAdapters(new AdapterUse(lora, float.NaN)), "NaN scale");
            Check.Throws(Status.InvalidArgument, "is a LoRA", () => c.SetAdapters(new AdapterUse(lora, 1, 1, 1)), "range on a LoRA");
            Check.Throws(Status.InvalidArgument, "outside", () => c.SetAdapters(new AdapterUse(cvec, 1, 0, 1)), "layer 0");
            Check.Throws(Status.InvalidArgument, "listed twice",
                () => c.SetAdapters(new AdapterUse(lora), new AdapterUse(lora, 0.5f)), "twice");
            Check.Throws(Status.InvalidArgument, "is a LoRA", () => c.SetAdapters(default(AdapterUse).With(lora)), "default(AdapterUse)");
            Check.Throws<ArgumentNullException>(() => c.SetAdapters(new AdapterUse(null)), "null adapter");
            using (var other = Model.Load(modelPath))
            using (var foreign = other.LoadAdapter(lora.Path))
            {
                Check.Throws(Status.InvalidArgument, "another model", () => c.SetAdapters(new AdapterUse(foreign)),
                             "an adapter of another Model");
            }
            using (var d = ex.CreateConversation())
            {
                d.Dispose();
                Check.Throws<ObjectDisposedException>(() => d.SetAdapters(new AdapterUse(lora)), "a disposed conversation");
            }
        }

        // default(AdapterUse) with just an adapter: scale 0, range 0..0.
        private static AdapterUse With(this AdapterUse u, Adapter a)
        {
            u.Adapter = a;
            return u;
        }
    }
}
