// MemoryFit.Choose: the configuration it picks loads and decodes, its KV
// bytes are what the model's shape says, and a budget one byte under the
// least a configuration needs is refused by name.
using System;
using Weft;

namespace Weft.Samples
{
    internal static class MemoryFitSample
    {
        public static void Run(string modelPath)
        {
            var req = new MemoryFitRequest
            {
                HostBytes = 1UL << 34, SpillRamBytes = 0, NCtx = 1024, MinNCtx = 256, NBatch = 64, NSeqMax = 4,
                FlashAttention = FlashAttention.Disabled,
            };
            var fit = MemoryFit.Choose(modelPath, req);
            Console.WriteLine("  16 GiB of RAM: n_ctx " + fit.NCtx + ", " + fit.GpuLayers + " GPU layers, host " + fit.Host.Total +
                              " bytes (weights " + fit.Host.Weights + ", KV " + fit.Host.Kv + ", compute " + fit.Host.Compute + ")");
            Check.Equal(1024u, fit.NCtx, "every cell wanted fits 16 GiB");
            Check.Equal(2, fit.NLayer, "tiny's layers");
            // tiny: 2 layers, 2 KV heads of 16 (K and V), f16: 128 bytes a cell a layer.
            Check.Equal(1024UL * 2 * 2 * 32 * 2, fit.Host.Kv, "KV bytes from the model's shape");
            Check.Equal(fit.Host.Weights + fit.Host.Kv + fit.Host.Compute + fit.Host.Spill, fit.Host.Total, "host total");

            using (var model = Model.Load(modelPath, new ModelParams { GpuLayers = fit.GpuLayers }))
            using (var ex = new Executor(model, new ExecutorParams
            {
                ContextSize = (int)fit.NCtx, BatchSize = (int)fit.NBatch, MaxSequences = 4, Threads = 2,
                FlashAttention = FlashAttention.Disabled, SpillRamBytes = 0,
            }))
            {
                var c = ex.CreateConversation();
                c.Prompt("The chosen configuration decodes", addBos: true);
                while (!ex.Step().Idle) { }
                Check.True(c.GetLogits().Length == model.VocabSize, "logits after the decode");
            }

            // The least: min_n_ctx cells. Its exact bytes fit; one byte less does not.
            req.NCtx = 256;
            var least = MemoryFit.Choose(modelPath, req);
            req.HostBytes = least.Host.Total;
            Check.Equal(256u, MemoryFit.Choose(modelPath, req).NCtx, "the least configuration's own bytes fit");
            req.HostBytes = least.Host.Total - 1;
            Check.Throws(Status.OutOfRange, least.Host.Total.ToString(), () => MemoryFit.Choose(modelPath, req),
                         "one byte under the least");
        }
    }
}
