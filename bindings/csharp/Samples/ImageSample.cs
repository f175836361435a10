// An NPC is shown an item: a picture goes into its conversation between two
// lines of text, while two other NPCs talk in the same steps. The vision
// encoder runs on the executor's own thread, so each Step stays a text-sized
// step. Checked: the NPC's logits equal the same input decoded alone in an
// executor of its own, and again after Save/Load into that one; its image
// span and positions; a broken file is Status.Corrupt and the NPC goes on;
// with ImageEncoding.Caller the image waits for Executor.EncodeImages, and
// then has the same logits.
//
// The projector lies beside the model: for tiny.gguf, tiny-mmproj.gguf
// (`weft make-mmproj --base tiny.gguf --out ...`; the CTest fixture makes it).
using System;
using System.IO;
using Weft;

namespace Weft.Samples
{
    internal static class ImageSample
    {
        private const string Lore = "The smith of Eldermoor looks at what the player holds out.";

        public static void Run(string modelPath)
        {
            var stem = modelPath.EndsWith(".gguf") ? modelPath.Substring(0, modelPath.Length - 5) : modelPath;
            var path = stem + "-mmproj.gguf";
            if (!File.Exists(path))
            {
                var msg = "no projector beside the model (" + path + "): make it with `weft make-mmproj --base " + modelPath
                          + " --out " + path + "`";
                if (Environment.GetEnvironmentVariable("WEFT_SAMPLES_REQUIRE_ADAPTERS") == "1") Check.True(false, msg);
                else Console.WriteLine("  skipped: " + msg);
                return;
            }
            var rgb = Picture(48, 32);
            using (var model = Model.Load(modelPath))
            using (var projector = Projector.Load(model, path, new ProjectorParams { Threads = 2 }))
            using (var ex = new Executor(model, NewParams(projector, 4)))
            using (var alone = new Executor(model, NewParams(projector, 1)))
            {
                Check.True(!projector.MRope && projector.NonCausal, "a gemma3-style projector");
                var smith = ex.CreateConversation();
                var a = ex.CreateConversation();
                var b = ex.CreateConversation();
                a.Prompt("The baker kneads the dough.", addBos: true);
                b.Prompt("The guard watches the gate.", addBos: true);
                Scene(smith, rgb);
                // The reference's picture is prepared on a worker thread, as a game
                // would keep PNG decoding off its main thread.
                PreparedImage prepared = null;
                var worker = new System.Threading.Thread(() => { prepared = projector.Prepare(48, 32, rgb); });
                worker.Start();
                worker.Join();
                Check.Equal(16, prepared.TokenCount, "the prepared image's positions");
                var reference = alone.CreateConversation();
                reference.Prompt(Lore + "\nPlayer: Look at this.", addBos: true);
                reference.PromptImage(prepared);
                reference.Prompt("\nSmith:");
                // The same as text with a media marker: the same positions.
                var marked = alone.CreateConversation();
                marked.Prompt(Lore + "\nPlayer: Look at this." + Projector.MediaMarker + "\nSmith:",
                              new[] { prepared }, addBos: true);
                Check.Equal(reference.Tokens.Length, marked.Tokens.Length, "text with a media marker");
                Check.Equal(1, marked.Images.Length, "its image");
                Check.Throws(Status.InvalidArgument, "media markers",
                             () => marked.Prompt("two " + Projector.MediaMarker + Projector.MediaMarker,
                                                 new[] { prepared }),
                             "markers and images in other numbers");
                marked.Dispose();
                prepared.Dispose();

                int steps = RunUntilLogits(ex, smith);
                RunUntilLogits(alone, reference);
                Console.WriteLine("  the smith's image decoded within " + steps + " steps, beside two others");
                Check.SameLogits(reference.GetLogits(), smith.GetLogits(), "the smith as alone");
                var st = ex.Stats;
                Console.WriteLine("  encoder: " + st.ImagesEncoded + " image in " + st.ImageEncodeMs.ToString("F1")
                                  + " ms (off the steps); " + st.ImageBatches + " embeddings batch in "
                                  + st.ImageDecodeMs.ToString("F2") + " ms");
                Check.True(st.ImagesEncoded == 1 && st.ImageBatches >= 1 && st.ImageEncodeMs > 0, "image stats");

                // A game that places each encode itself (its frames leave no idle
                // core): nothing encodes the image until it calls EncodeImages.
                var placedParams = NewParams(projector, 2);
                placedParams.ImageEncoding = ImageEncoding.Caller;
                using (var placed = new Executor(model, placedParams))
                {
                    var npc = placed.CreateConversation();
                    Scene(npc, rgb);
                    // 100 ms of steps: an encoder thread would have encoded it (5 ms) by then.
                    var clock = System.Diagnostics.Stopwatch.StartNew();
                    while (clock.ElapsedMilliseconds < 100)
                    {
                        placed.Step();
                        System.Threading.Thread.Sleep(1);
                    }
                    Check.True(!npc.Images[0].Encoded && placed.Stats.ImagesPending == 1,
                               "the image waits for EncodeImages");
                    var done = placed.EncodeImages();
                    Check.True(done.Images == 1 && done.Failed == 0 && done.Pending == 0 && done.Seconds > 0,
                               "EncodeImages encoded it on this thread");
                    RunUntilLogits(placed, npc);
                    Check.SameLogits(reference.GetLogits(), npc.GetLogits(), "encoded by EncodeImages, as alone");
                    Check.Equal(0, placed.EncodeImages(4).Images, "nothing left to encode");
                    npc.Dispose();
                }

                var images = smith.Images;
                Check.Equal(1, images.Length, "one image");
                Check.True(images[0].Encoded && images[0].TokenCount == 16, "its span");
                var tokens = smith.Tokens;
                for (int i = images[0].Begin; i < images[0].Begin + images[0].TokenCount; ++i)
                {
                    if (tokens[i] != Conversation.ImageToken(images[0].Id))
                    {
                        Check.True(false, "position " + i + " holds the image");
                        break;
                    }
                }

                var saved = smith.Save();
                using (var back = alone.Load(saved))
                {
                    Check.SameLogits(reference.GetLogits(), back.GetLogits(), "the smith saved and loaded");
                    Check.Equal(1, back.Images.Length, "its image came along");
                }

                var broken = new byte[] { 0x89, (byte)'P', (byte)'N', (byte)'G', 13, 10, 26, 10, 0, 0, 0, 13,
                                          (byte)'I', (byte)'H', (byte)'D', (byte)'R', 0, 0, 0, 16, 0, 0, 0, 16, 8, 2, 0, 0, 0,
                                          1, 2, 3, 4, 5, 6, 7, 8 };
                Check.Throws(Status.Corrupt, "do not decode", () => smith.PromptImage(broken), "a broken PNG");
                Check.Throws(Status.InvalidArgument, "needs 75 bytes", () => smith.PromptImage(5, 5, new byte[30]),
                             "RGB of the wrong size");
                Check.Equal(1, smith.Images.Length, "still one image");
                smith.Prompt(" Nice.");
                RunUntilLogits(ex, smith);
                Check.True(smith.Error == null, "the smith goes on");
                foreach (var c in new[] { smith, a, b, reference }) c.Dispose();
            }
        }

        private static void Scene(Conversation c, byte[] rgb)
        {
            c.Prompt(Lore + "\nPlayer: Look at this.", addBos: true);
            c.PromptImage(48, 32, rgb);
            c.Prompt("\nSmith:");
        }

        private static byte[] Picture(int w, int h)
        {
            var px = new byte[w * h * 3];
            for (int i = 0; i < px.Length; ++i) px[i] = (byte)((i * 37 + (i >> 5) * 11) & 0xFF);
            return px;
        }

        private static ExecutorParams NewParams(Projector p, int slots)
        {
            return new ExecutorParams { ContextSize = 1024, BatchSize = 64, MaxSequences = slots, Threads = 2, Projector = p };
        }

        // The image waits for the encoder thread meanwhile: bounded by time.
        private static int RunUntilLogits(Executor ex, Conversation c)
        {
            var clock = System.Diagnostics.Stopwatch.StartNew();
            int steps = 0;
            while (!c.HasLogits && clock.Elapsed.TotalSeconds < 60)
            {
                if (ex.Step().Idle) System.Threading.Thread.Sleep(1);
                ++steps;
            }
            Check.True(c.HasLogits, "logits within 60 s");
            return steps;
        }
    }
}
