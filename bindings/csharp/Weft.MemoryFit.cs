// Weft.MemoryFit.cs — n_gpu_layers and n_ctx for the memory a game leaves
// its model (weft/c/fit.h, weft::fit_memory): llama.cpp's dry run of the
// model and an executor of the shape, per device, against the budget.
using System;
using System.Runtime.InteropServices;

namespace Weft
{
    // The budget and the executor's shape; the defaults are the C ABI's
    // (weft_fit_params_init).
    public sealed class MemoryFitRequest
    {
        public ulong DeviceBytes;                 // GPU memory left for the model
        public ulong HostBytes;                   // RAM left for it, the spill RAM tier included
        public ulong SpillRamBytes = 1UL << 30;   // ExecutorParams' spill RAM tier
        public uint NCtx = 4096;                  // the most KV cells wanted
        public uint MinNCtx = 256;                // the fewest acceptable
        public uint NBatch = 512;
        public uint NUbatch = 0;
        public uint NSeqMax = 16;
        public KvType KvType = KvType.F16;
        public FlashAttention FlashAttention = FlashAttention.Auto;  // Auto counts the larger kernel
    }

    // Bytes of one side (device or host) of the chosen configuration.
    public struct MemoryBytes
    {
        public ulong Weights, Kv, Compute, Spill, Total;
    }

    public sealed class MemoryFit
    {
        public int GpuLayers;       // for ModelParams.GpuLayers; -1 = every layer
        public uint NCtx;           // for the executor's NCtx
        public uint NBatch;         // for its NBatch (<= NCtx)
        public int NLayer;          // the model's layers
        public int LayersOnDevice;  // of NLayer + 1 (the output layer counts)
        public MemoryBytes Device, Host;

        // The most KV cells (up to NCtx) and, for them, the most layers on the
        // GPU whose device and host bytes both fit. WeftException
        // (Status.OutOfRange) when nothing fits: its message names the least
        // bytes needed and the budget.
        public static MemoryFit Choose(string modelPath, MemoryFitRequest request)
        {
            if (modelPath == null) throw new ArgumentNullException("modelPath");
            if (request == null) throw new ArgumentNullException("request");
            var p = new Native.FitParamsNative();
            Native.Check(Native.weft_fit_params_init(ref p, Native.Size(Marshal.SizeOf(typeof(Native.FitParamsNative)))));
            p.device_bytes = request.DeviceBytes;
            p.host_bytes = request.HostBytes;
            p.spill_ram_bytes = request.SpillRamBytes;
            p.n_ctx = request.NCtx;
            p.min_n_ctx = request.MinNCtx;
            p.n_batch = request.NBatch;
            p.n_ubatch = request.NUbatch;
            p.n_seq_max = request.NSeqMax;
            p.kv_type = (int)request.KvType;
            p.flash_attn = (int)request.FlashAttention;
            var r = new Native.FitResultNative();
            r.struct_size = Native.Size(Marshal.SizeOf(typeof(Native.FitResultNative)));
            Native.Check(Native.weft_fit_choose(Native.Utf8z(modelPath), ref p, ref r));
            return new MemoryFit
            {
                GpuLayers = r.n_gpu_layers, NCtx = r.n_ctx, NBatch = r.n_batch, NLayer = r.n_layer,
                LayersOnDevice = r.layers_on_device, Device = r.device, Host = r.host,
            };
        }
    }

    internal static partial class Native
    {
        [StructLayout(LayoutKind.Sequential)]
        internal struct FitParamsNative
        {
            public UIntPtr struct_size;
            public ulong device_bytes, host_bytes, spill_ram_bytes;
            public uint n_ctx, min_n_ctx, n_batch, n_ubatch, n_seq_max;
            public int kv_type, flash_attn;
        }

        [StructLayout(LayoutKind.Sequential)]
        internal struct FitResultNative
        {
            public UIntPtr struct_size;
            public int n_gpu_layers;
            public uint n_ctx, n_batch;
            public int n_layer, layers_on_device;
            public MemoryBytes device, host;
        }

        [DllImport(Lib)] public static extern Status weft_fit_params_init(ref FitParamsNative p, UIntPtr size);
        [DllImport(Lib)] public static extern Status weft_fit_choose(byte[] modelPath, ref FitParamsNative p, ref FitResultNative result);
    }
}
