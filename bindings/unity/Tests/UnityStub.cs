// UnityStub.cs — the few UnityEngine/UnityEditor/AOT types the weft package
// and its sample use, so they compile and run under plain Mono with Unity's
// defines. Tests only, never shipped. Behaviour is the minimum the tests
// need; the hooks a test drives (Raise*, key presses) are internal.
using System;
using System.Collections;
using System.Collections.Generic;

namespace AOT
{
    [AttributeUsage(AttributeTargets.Method)]
    public sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type type) { }
    }
}

namespace UnityEngine
{
    public enum RuntimeInitializeLoadType { AfterSceneLoad, BeforeSceneLoad, AfterAssembliesLoaded, BeforeSplashScreen, SubsystemRegistration }

    [AttributeUsage(AttributeTargets.Method)]
    public sealed class RuntimeInitializeOnLoadMethodAttribute : Attribute
    {
        public RuntimeInitializeOnLoadMethodAttribute() { }
        public RuntimeInitializeOnLoadMethodAttribute(RuntimeInitializeLoadType t) { }
    }

    public enum RuntimePlatform { LinuxEditor = 16, LinuxPlayer = 13, Android = 11 }

    public static class Application
    {
        public static string streamingAssetsPath = "";
        public static string persistentDataPath = "";
        public static RuntimePlatform platform = RuntimePlatform.LinuxEditor;
        public static event Action quitting;
        internal static void RaiseQuitting() { var q = quitting; if (q != null) q(); }
        internal static int QuittingHandlers { get { return quitting == null ? 0 : quitting.GetInvocationList().Length; } }
    }

    public static class SystemInfo
    {
        public static int processorCount { get { return Environment.ProcessorCount; } }
    }

    public enum KeyCode { None = 0, L = 108, S = 115 }

    public static class Input
    {
        internal static readonly bool[] Down = new bool[512];
        public static bool GetKeyDown(KeyCode k) { return Down[(int)k]; }
    }

    public class AsyncOperation
    {
        public bool isDone { get; internal set; }
    }

    public sealed class Coroutine
    {
        internal readonly Stack<IEnumerator> Stack = new Stack<IEnumerator>();
    }

    public class Object { }

    public class Component : Object { }

    public class Behaviour : Component
    {
        public bool enabled = true;
    }

    public class MonoBehaviour : Behaviour
    {
        internal readonly List<Coroutine> Coroutines = new List<Coroutine>();

        public Coroutine StartCoroutine(IEnumerator routine)
        {
            var c = new Coroutine();
            c.Stack.Push(routine);
            Coroutines.Add(c);
            StepCoroutine(c);  // Unity runs a coroutine up to its first yield at once
            return c;
        }

        // Advances every coroutine one frame (the stub engine calls this).
        internal void StepCoroutines()
        {
            foreach (var c in Coroutines.ToArray()) StepCoroutine(c);
            Coroutines.RemoveAll(c => c.Stack.Count == 0);
        }

        private static void StepCoroutine(Coroutine c)
        {
            while (c.Stack.Count > 0)
            {
                var top = c.Stack.Peek();
                var op = top.Current as AsyncOperation;
                if (op != null && !op.isDone) return;
                if (!top.MoveNext()) { c.Stack.Pop(); continue; }
                var nested = top.Current as IEnumerator;
                if (nested != null) { c.Stack.Push(nested); continue; }
                return;  // null, or an operation to wait for: next frame
            }
        }
    }

    public static class GUILayout
    {
        internal static readonly List<string> Labels = new List<string>();
        public static void Label(string text) { Labels.Add(text); }
        internal static readonly List<string> Buttons = new List<string>();
        public static bool Button(string text) { Buttons.Add(text); return false; }
    }
}

namespace UnityEngine.Networking
{
    public class DownloadHandler { }

    public sealed class DownloadHandlerFile : DownloadHandler
    {
        public DownloadHandlerFile(string path) { Path = path; }
        internal readonly string Path;
        public bool removeFileOnAbort { get; set; }
    }

    public sealed class UnityWebRequestAsyncOperation : AsyncOperation { }

    // Enough for file:// and failing URLs: copies the file synchronously.
    public sealed class UnityWebRequest : IDisposable
    {
        private readonly string url;
        private UnityWebRequest(string url) { this.url = url; }
        public static UnityWebRequest Get(string url) { return new UnityWebRequest(url); }
        public DownloadHandler downloadHandler { get; set; }
        public string error { get; private set; }

        public UnityWebRequestAsyncOperation SendWebRequest()
        {
            var op = new UnityWebRequestAsyncOperation();
            const string file = "file://";
            var target = downloadHandler as DownloadHandlerFile;
            try
            {
                if (!url.StartsWith(file) || target == null) throw new InvalidOperationException("stub: only file:// to a file");
                System.IO.File.Copy(url.Substring(file.Length), target.Path, true);
            }
            catch (Exception e) { error = e.Message; }
            op.isDone = true;
            return op;
        }

        public void Dispose() { }
    }
}

namespace UnityEditor
{
    [AttributeUsage(AttributeTargets.Method)]
    public sealed class InitializeOnLoadMethodAttribute : Attribute { }

    public static class AssemblyReloadEvents
    {
        public delegate void AssemblyReloadCallback();
        public static event AssemblyReloadCallback beforeAssemblyReload;
        internal static void RaiseBeforeReload() { var b = beforeAssemblyReload; if (b != null) b(); }
        internal static int Handlers { get { return beforeAssemblyReload == null ? 0 : beforeAssemblyReload.GetInvocationList().Length; } }
    }

    public enum PlayModeStateChange { EnteredEditMode, ExitingEditMode, EnteredPlayMode, ExitingPlayMode }

    public static class EditorApplication
    {
        public static event Action<PlayModeStateChange> playModeStateChanged;
        internal static void Raise(PlayModeStateChange c) { var p = playModeStateChanged; if (p != null) p(c); }
    }
}

namespace UnityEngine
{
    public static class Debug
    {
        internal static readonly System.Collections.Generic.List<string> Warnings = new System.Collections.Generic.List<string>();
        public static void LogWarning(object message) { Warnings.Add(message == null ? "" : message.ToString()); }
    }
}

namespace UnityEditor
{
    public enum BuildTarget { StandaloneOSX = 2, StandaloneWindows64 = 19, iOS = 9, Android = 13, StandaloneLinux64 = 24 }
}

namespace UnityEditor.Build
{
    public interface IOrderedCallback { int callbackOrder { get; } }
    public interface IPreprocessBuildWithReport : IOrderedCallback
    {
        void OnPreprocessBuild(UnityEditor.Build.Reporting.BuildReport report);
    }
    public class BuildFailedException : Exception
    {
        public BuildFailedException(string message) : base(message) { }
    }
}

namespace UnityEditor.Build.Reporting
{
    public struct BuildSummary { public UnityEditor.BuildTarget platform; }
    public sealed class BuildReport { public BuildSummary summary; }
}
