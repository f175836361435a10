// NpcDialogue.cs — the weft package's sample: put it on a GameObject, put a
// GGUF model at StreamingAssets/<ModelFile>, press Play.
//
// - The model loads on a thread (Model.LoadAsync); the editor never freezes.
// - One executor; weft's worker steps within FrameBudgetMs per step, on
//   RecommendedThreads (cores the game does not keep).
// - A shared "town" prompt is decoded once; each NPC forks from it (the
//   prefix is shared in the KV cache) and streams its reply.
// - Update polls events through an EventPump (no garbage per frame) and
//   appends each token's text to that NPC's subtitle; OnGUI draws them.
// - S (or its button) saves NPC 0 (SaveAsync: never waits for a step), L
//   loads it back.
// - Leaving Play Mode, a domain reload or quitting: WeftUnity's hooks call
//   Library.Shutdown; OnDestroy disposes what this script made.
using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using UnityEngine;
using Weft;
using Weft.Unity;

namespace Weft.Samples
{
    public class NpcDialogue : MonoBehaviour
    {
        public string ModelFile = "npc.gguf";
        public int NpcCount = 4;
        public float FrameBudgetMs = 4f;
        public int MaxTokens = 48;
        public int KeepThreadsForGame = 2;
        public int ContextSize = 4096;   // KV cells shared by all NPCs
        public int MaxHistory = 1024;    // an NPC past this starts over from the town prompt
        public bool KeepTalking = true;  // a finished NPC is asked again
        public string Town = "You are in the town of Eldermoor. The market is busy.";

        // Readable state, for UI and for checks.
        public string Status = "starting";
        public bool Ready { get { return ex != null; } }
        public int RepliesFinished { get; private set; }
        public int Restarts { get; private set; }
        public int TokensReceived { get; private set; }
        public byte[] SavedState { get; private set; }
        public Executor Executor { get { return ex; } }
        public Conversation Npc(int i) { return npcs[i]; }
        public StringBuilder Subtitle(int i) { return subtitles[i]; }

        private CancellationTokenSource cancelLoad;
        private Task<Model> loading;
        private Task<byte[]> saving;
        private Model model;
        private Executor ex;
        private Conversation town;
        private Conversation[] npcs;
        private Generation[] replies;
        private ulong[] ids;
        private bool[] finished;
        private StringBuilder[] subtitles;
        private string[] shown;
        private bool[] dirty;
        private readonly EventPump pump = new EventPump();
        private GenerateParams generate;

        private void Start()
        {
            cancelLoad = new CancellationTokenSource();
            StartCoroutine(WeftUnity.ResolveModelPath(ModelFile, OnModelPath));
        }

        private void OnModelPath(string path, string error)
        {
            if (path == null) { Status = error; return; }
            Status = "loading " + path;
            loading = Model.LoadAsync(path, null, cancelLoad.Token);
        }

        private void Begin()
        {
            ex = new Executor(model, new ExecutorParams
            {
                ContextSize = ContextSize, MaxSequences = NpcCount + 2, Events = true,
                Threads = WeftUnity.RecommendedThreads(KeepThreadsForGame),
            });
            town = ex.CreateConversation();
            town.Prompt(Town, addBos: true);
            generate = new GenerateParams { MaxTokens = MaxTokens, Sampler = new SamplerParams { Temperature = 0.8f, Seed = 7 } };
            npcs = new Conversation[NpcCount];
            replies = new Generation[NpcCount];
            ids = new ulong[NpcCount];
            finished = new bool[NpcCount];
            subtitles = new StringBuilder[NpcCount];
            shown = new string[NpcCount];
            dirty = new bool[NpcCount];
            for (int i = 0; i < NpcCount; ++i)
            {
                npcs[i] = town.Fork();
                npcs[i].Prompt("\nNPC " + i + ":");
                ids[i] = npcs[i].Id;
                subtitles[i] = new StringBuilder(1024);
                replies[i] = npcs[i].Generate(generate);
            }
            ex.Start(new WorkerParams { Budget = new StepBudget { MaxTime = TimeSpan.FromMilliseconds(FrameBudgetMs) } });
            Status = "talking";
        }

        private void Update()
        {
            if (loading != null)
            {
                if (!loading.IsCompleted) return;
                if (loading.Status == TaskStatus.RanToCompletion) { model = loading.Result; Begin(); }
                else Status = loading.IsCanceled ? "load cancelled" : "load failed: " + loading.Exception.InnerException.Message;
                loading = null;
            }
            if (ex == null) return;
            int n = pump.Poll(ex);
            for (int i = 0; i < n; ++i)
            {
                var e = pump[i];
                int k = IndexOf(e.ConversationId);
                if (k < 0) continue;
                if (e.Kind == EventKind.Token)
                {
                    var sb = subtitles[k];
                    if (sb.Length > 768) sb.Remove(0, 512);  // in place: the capacity stays
                    pump.AppendText(i, sb);
                    dirty[k] = true;
                    ++TokensReceived;
                }
                else if (e.Kind == EventKind.Finished)
                {
                    finished[k] = true;
                    ++RepliesFinished;
                }
            }
            if (KeepTalking) AskOneFinishedNpc();
            if (saving != null && saving.IsCompleted)
            {
                SavedState = saving.Status == TaskStatus.RanToCompletion ? saving.Result : null;
                saving = null;
            }
#if ENABLE_LEGACY_INPUT_MANAGER
            // (Projects on the Input System package alone: use OnGUI's buttons.)
            if (Input.GetKeyDown(KeyCode.S)) SaveNpc(0);
            if (Input.GetKeyDown(KeyCode.L)) LoadSavedNpc(0);
#endif
        }

        // One per frame: a new Generation allocates, so restarts are spread.
        private void AskOneFinishedNpc()
        {
            for (int k = 0; k < npcs.Length; ++k)
            {
                if (!finished[k]) continue;
                finished[k] = false;
                ++Restarts;
                if (replies[k] != null) replies[k].Dispose();
                if (npcs[k].TokenCount + MaxTokens + 16 > MaxHistory)
                {
                    // Forget: a fresh fork of the shared prompt (its cells are shared again).
                    npcs[k].Dispose();
                    npcs[k] = town.Fork();
                    ids[k] = npcs[k].Id;
                }
                npcs[k].Prompt("\nPlayer: And then?\nNPC " + k + ":");
                replies[k] = npcs[k].Generate(generate);
                return;
            }
        }

        private int IndexOf(ulong id)
        {
            for (int k = 0; k < ids.Length; ++k) if (ids[k] == id) return k;
            return -1;
        }

        // Starts saving NPC i at the worker's next step boundary; SavedState
        // holds the bytes from a later frame on.
        public void SaveNpc(int i)
        {
            if (ex != null && saving == null) saving = npcs[i].SaveAsync();
        }

        // Replaces NPC i with the saved state (history, sampler, KV data, a
        // reply it was generating). False when nothing is saved yet.
        public bool LoadSavedNpc(int i)
        {
            if (ex == null || SavedState == null) return false;
            var loaded = ex.Load(SavedState);
            if (replies[i] != null) replies[i].Dispose();
            npcs[i].Dispose();
            npcs[i] = loaded;
            ids[i] = loaded.Id;
            subtitles[i].Length = 0;
            // A reply running at the save runs on; else ask again next Update.
            replies[i] = loaded.CurrentGeneration;
            finished[i] = replies[i] == null;
            return true;
        }

        private void OnGUI()
        {
            if (npcs == null) { GUILayout.Label(Status); return; }
            if (GUILayout.Button("Save NPC 0 (S)")) SaveNpc(0);
            if (GUILayout.Button("Load NPC 0 (L)")) LoadSavedNpc(0);
            for (int k = 0; k < npcs.Length; ++k)
            {
                if (dirty[k]) { shown[k] = subtitles[k].ToString(); dirty[k] = false; }
                GUILayout.Label("NPC " + k + ": " + shown[k]);
            }
        }

        private void OnDestroy()
        {
            if (cancelLoad != null) cancelLoad.Cancel();
            // Executor first: it stops the worker; conversations then just go.
            if (ex != null) ex.Dispose();
            if (model != null) model.Dispose();
            ex = null;
            model = null;
        }
    }
}
