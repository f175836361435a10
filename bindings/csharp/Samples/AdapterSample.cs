// Two NPCs, two adapters, one executor: Brenna speaks through a LoRA, Mara
// through a control vector, and both generate in the same steps (weft
// decodes each adapter setting in a llama_decode of its own). Checked: each
// NPC's logits equal its setting's decoded alone in an executor of its own
// and differ from the base model's; Adapters reads the setting back; the
// stats count the switches.
//
// The adapter files lie beside the model: for tiny.gguf, tiny-lora.gguf and
// tiny-cvec.gguf (`weft make-adapter --base tiny.gguf --kind lora|cvec
// --out ...`; the CTest fixtures make them).
using System;
using System.IO;
using Weft;

namespace Weft.Samples
{
    internal static class AdapterSample
    {
        private const string Lore = "The town of Eldermoor lies between the river and the old forest.";

        public static void Run(string modelPath)
        {
            string loraPath, cvecPath;
            if (!FindFiles(modelPath, out loraPath, out cvecPath)) return;
            using (var model = Model.Load(modelPath))
            using (var lora = model.LoadAdapter(loraPath))
            using (var cvec = model.LoadAdapter(cvecPath))
            using (var ex = new Executor(model, NewParams()))
            {
                Console.WriteLine("  " + lora.Name + " (" + Adapter.KindName(lora.Kind) + "), " + cvec.Name + " ("
                                  + Adapter.KindName(cvec.Kind) + ", layers 1.." + cvec.LayerCount + ")");
                var brenna = ex.CreateConversation();
                var mara = ex.CreateConversation();
                var plain = ex.CreateConversation();  // the base model, to compare
                brenna.SetAdapters(new AdapterUse(lora));
                mara.SetAdapters(new AdapterUse(cvec, 0.8f));
                brenna.Prompt(Lore + "\nBrenna:", addBos: true);
                mara.Prompt(Lore + "\nMara:", addBos: true);
                plain.Prompt(Lore + "\nBrenna:", addBos: true);
                while (!ex.Step().Idle) { }

                Check.SameLogits(Alone(model, brenna.Tokens, new AdapterUse(lora)), brenna.GetLogits(), "Brenna as alone");
                Check.SameLogits(Alone(model, mara.Tokens, new AdapterUse(cvec, 0.8f)), mara.GetLogits(), "Mara as alone");
                Check.True(Check.Nmse(brenna.GetLogits(), plain.GetLogits()) > 1e-4, "the LoRA changes Brenna's logits");

                var setting = mara.Adapters;
                Check.Equal(1, setting.Length, "Mara's setting");
                Check.Equal(cvec.Fingerprint, setting[0].Adapter.Fingerprint, "Mara's adapter");
                Check.Equal(0.8f, setting[0].Scale, "Mara's scale");
                foreach (var u in setting) u.Adapter.Dispose();

                var b = brenna.Generate(new GenerateParams { MaxTokens = 12, Stop = new[] { "\n" } });
                var m = mara.Generate(new GenerateParams { MaxTokens = 12, Stop = new[] { "\n" } });
                while (!b.IsDone || !m.IsDone) ex.Step();
                Console.WriteLine("  Brenna:" + b.Text);
                Console.WriteLine("  Mara:" + m.Text);
                var s = ex.Stats;
                Console.WriteLine("  " + s.Steps + " steps, " + s.AdapterSwitches + " adapter switches");
                Check.True(s.AdapterSwitches >= 2, "the steps switched between the NPCs' settings");
                b.Dispose();
                m.Dispose();
                brenna.Dispose();
                mara.Dispose();
                plain.Dispose();
            }
        }

        internal static ExecutorParams NewParams()
        {
            return new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = 4, Threads = 2 };
        }

        // `tokens` decoded under `uses` in an executor of its own: the logits.
        internal static float[] Alone(Model model, int[] tokens, params AdapterUse[] uses)
        {
            using (var ex = new Executor(model, NewParams()))
            using (var c = ex.CreateConversation())
            {
                c.SetAdapters(uses);
                c.Prompt(tokens);
                while (!ex.Step().Idle) { }
                return c.GetLogits();
            }
        }

        // <model without .gguf>-lora.gguf and -cvec.gguf. Missing: skipped
        // with a message, or a failure under CTest (WEFT_SAMPLES_REQUIRE_ADAPTERS=1).
        internal static bool FindFiles(string modelPath, out string lora, out string cvec)
        {
            var stem = modelPath.EndsWith(".gguf") ? modelPath.Substring(0, modelPath.Length - 5) : modelPath;
            lora = stem + "-lora.gguf";
            cvec = stem + "-cvec.gguf";
            if (File.Exists(lora) && File.Exists(cvec)) return true;
            var msg = "no adapter files beside the model (" + lora + ", " + cvec + "): make them with `weft make-adapter --base "
                      + modelPath + " --kind lora|cvec --out ...`";
            if (Environment.GetEnvironmentVariable("WEFT_SAMPLES_REQUIRE_ADAPTERS") == "1") Check.True(false, msg);
            else Console.WriteLine("  skipped: " + msg);
            return false;
        }
    }
}
