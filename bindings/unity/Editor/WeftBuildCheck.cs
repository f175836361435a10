// WeftBuildCheck.cs — checked when a player build starts (Editor only):
// a build for a platform whose native weft this package should carry but
// does not fails there, with the reason, instead of shipping a game that
// throws DllNotFoundException on the player's machine. A platform this
// package has no native library for at all (macOS, iOS, Android, ...) gets
// a warning: the game may use weft only on desktop.
using System.IO;
using UnityEditor.Build;
using UnityEditor.Build.Reporting;

namespace Weft.Unity.Editor
{
    public static class WeftPlatforms
    {
        public const string PackageName = "com.weft.llm";

        // The native library a player for `target` (a BuildTarget's name)
        // loads, relative to the package's root; null when this package
        // carries none for it.
        public static string PluginFor(string target)
        {
            switch (target)
            {
                case "StandaloneLinux64": return "Runtime/Plugins/Linux/x86_64/libweft.so";
                case "StandaloneWindows64": return "Runtime/Plugins/Windows/x86_64/weft.dll";
                default: return null;
            }
        }

        // Why a player for `target` cannot load weft from the package at
        // `packageRoot`: null when it can; `fatal` tells a missing library
        // this package should have from a platform it has none for.
        public static string Problem(string target, string packageRoot, out bool fatal)
        {
            fatal = false;
            string plugin = PluginFor(target);
            if (plugin == null)
            {
                return "weft: the " + PackageName + " package has no native library for " + target +
                       " (it carries Linux x86-64 and Windows x64); calls into weft will throw DllNotFoundException " +
                       "there. macOS, iOS and Android are built by hand: Documentation~/weft.md, \"Platforms\".";
            }
            string path = Path.Combine(packageRoot, plugin);
            if (File.Exists(path)) return null;
            fatal = true;
            return "weft: " + plugin + " is missing from " + packageRoot + ": this package was made without the " +
                   target + " library (Windows: configure weft with -DWEFT_UNITY_WINDOWS_DLL=<weft.dll>, then " +
                   "rebuild the unity-package target); a player built now would throw DllNotFoundException.";
        }
    }

    internal sealed class WeftBuildCheck : IPreprocessBuildWithReport
    {
        public int callbackOrder { get { return 0; } }

        public void OnPreprocessBuild(BuildReport report)
        {
            bool fatal;
            // Unity resolves Packages/<name> to wherever the package lives.
            string problem = WeftPlatforms.Problem(report.summary.platform.ToString(),
                                                   Path.GetFullPath("Packages/" + WeftPlatforms.PackageName), out fatal);
            if (problem == null) return;
            if (fatal) throw new BuildFailedException(problem);
            UnityEngine.Debug.LogWarning(problem);
        }
    }
}
