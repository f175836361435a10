// WeftUnity.cs — the Unity-only glue of the weft package: Library.Shutdown
// wired to domain reloads, leaving Play Mode and quitting, and model paths
// out of StreamingAssets (copied out of the APK on Android). Compiled only
// inside Unity (UNITY_5_3_OR_NEWER); the binding it glues is Weft*.cs.
#if UNITY_5_3_OR_NEWER
using System;
using System.Collections;
using System.IO;
using UnityEngine;
using UnityEngine.Networking;
#if UNITY_EDITOR
using UnityEditor;
#endif

namespace Weft.Unity
{
    public static class WeftUnity
    {
        // How many times Shutdown ran through these hooks (for checks).
        public static int Shutdowns { get; private set; }

        // Players: shut down on quit. SubsystemRegistration runs first in a
        // Play session, also when "Enter Play Mode Options" skip the reload.
        [RuntimeInitializeOnLoadMethod(RuntimeInitializeLoadType.SubsystemRegistration)]
        private static void InstallRuntimeHooks()
        {
            GameDefaults.PreferPassiveOpenMp();  // before anything loads libweft
            Application.quitting -= OnQuitting;
            Application.quitting += OnQuitting;
        }

#if UNITY_EDITOR
        // Editor: before the C# domain goes (script changes, entering Play
        // Mode), and when Play Mode ends, so statics' executors do not keep
        // their workers and models in the editor.
        [InitializeOnLoadMethod]
        private static void InstallEditorHooks()
        {
            // Effective in the editor's first domain only: the editor keeps
            // libweft (and libgomp's settings) loaded across reloads.
            GameDefaults.PreferPassiveOpenMp();
            AssemblyReloadEvents.beforeAssemblyReload -= OnBeforeAssemblyReload;
            AssemblyReloadEvents.beforeAssemblyReload += OnBeforeAssemblyReload;
            EditorApplication.playModeStateChanged -= OnPlayModeStateChanged;
            EditorApplication.playModeStateChanged += OnPlayModeStateChanged;
        }

        private static void OnBeforeAssemblyReload() { ShutdownNow(); }

        private static void OnPlayModeStateChanged(PlayModeStateChange change)
        {
            if (change == PlayModeStateChange.ExitingPlayMode) ShutdownNow();
        }
#endif

        private static void OnQuitting() { ShutdownNow(); }

        // Library.Shutdown, counted; what every hook above calls.
        public static void ShutdownNow()
        {
            ++Shutdowns;
            Library.Shutdown();
        }

        // Decode threads for weft in a game: GameDefaults.Threads with
        // Unity's processor count (logical cores); keep at least the main
        // and render threads.
        public static int RecommendedThreads(int keepForGame = 2)
        {
            int logical = SystemInfo.processorCount;
            return Math.Max(1, (logical >= 4 ? logical / 2 : logical) - Math.Max(0, keepForGame));
        }

        // The file path weft can open for a model in StreamingAssets.
        // Desktop, iOS: the file itself. Android: StreamingAssets are inside
        // the APK, so the file is copied to persistentDataPath (streamed, on
        // every call: call it once per session) and that copy's path is
        // passed to `done` (null and an error message on failure). Run it
        // as a coroutine.
        public static IEnumerator ResolveModelPath(string relativePath, Action<string, string> done)
        {
            var source = Path.Combine(Application.streamingAssetsPath, relativePath);
            if (!source.Contains("://"))  // a plain file (not jar: or http:)
            {
                done(source, null);
                yield break;
            }
            var target = Path.Combine(Application.persistentDataPath, relativePath);
            var dir = Path.GetDirectoryName(target);
            if (!string.IsNullOrEmpty(dir)) Directory.CreateDirectory(dir);
            var partial = target + ".partial";
            using (var req = UnityWebRequest.Get(source))
            {
                // Streamed to disk: a model is too big for a byte[].
                req.downloadHandler = new DownloadHandlerFile(partial) { removeFileOnAbort = true };
                yield return req.SendWebRequest();
                if (!string.IsNullOrEmpty(req.error))
                {
                    done(null, "copying " + source + ": " + req.error);
                    yield break;
                }
            }
            if (File.Exists(target)) File.Delete(target);
            File.Move(partial, target);
            done(target, null);
        }
    }
}
#endif
