// EditorTests.cs — the package's Editor assembly (Editor/WeftBuildCheck.cs)
// against the stub's build types: which player builds it lets through,
// warns about, or stops.
using System;
using System.IO;
using UnityEditor;
using UnityEditor.Build;
using UnityEditor.Build.Reporting;
using Weft.Samples;
using Weft.Unity.Editor;

namespace Weft.UnityTests
{
    internal static class EditorTests
    {
        // A project whose Packages/com.weft.llm has the Linux library only
        // (a package made without WEFT_UNITY_WINDOWS_DLL).
        public static void BuildCheck(string model)
        {
            string project = Path.Combine(Path.GetTempPath(), "weft-editor-" + Guid.NewGuid().ToString("N"));
            string package = Path.Combine(project, "Packages", WeftPlatforms.PackageName);
            string linux = Path.Combine(package, WeftPlatforms.PluginFor("StandaloneLinux64"));
            Directory.CreateDirectory(Path.GetDirectoryName(linux));
            File.WriteAllText(linux, "");
            string cwd = Directory.GetCurrentDirectory();
            Directory.SetCurrentDirectory(project);
            try
            {
                IPreprocessBuildWithReport check = Activator.CreateInstance(
                    typeof(WeftPlatforms).Assembly.GetType("Weft.Unity.Editor.WeftBuildCheck"), true) as IPreprocessBuildWithReport;
                Check.True(check != null, "WeftBuildCheck is a build preprocessor");
                Func<BuildTarget, BuildReport> report = t => new BuildReport { summary = new BuildSummary { platform = t } };

                UnityEngine.Debug.Warnings.Clear();
                check.OnPreprocessBuild(report(BuildTarget.StandaloneLinux64));
                Check.Equal(0, UnityEngine.Debug.Warnings.Count, "a Linux player: no warning");

                string failure = null;
                try { check.OnPreprocessBuild(report(BuildTarget.StandaloneWindows64)); }
                catch (BuildFailedException e) { failure = e.Message; }
                Check.True(failure != null && failure.Contains("weft.dll") && failure.Contains("WEFT_UNITY_WINDOWS_DLL"),
                           "a Windows player without weft.dll in the package fails, naming it and how to add it: " +
                           (failure ?? "did not fail"));

                check.OnPreprocessBuild(report(BuildTarget.iOS));
                Check.True(UnityEngine.Debug.Warnings.Count == 1 && UnityEngine.Debug.Warnings[0].Contains("no native library for iOS"),
                           "an iOS player: a warning naming iOS (" + string.Join(" | ", UnityEngine.Debug.Warnings.ToArray()) + ")");

                // With weft.dll added, Windows passes too.
                string win = Path.Combine(package, WeftPlatforms.PluginFor("StandaloneWindows64"));
                Directory.CreateDirectory(Path.GetDirectoryName(win));
                File.WriteAllText(win, "");
                check.OnPreprocessBuild(report(BuildTarget.StandaloneWindows64));
            }
            finally
            {
                Directory.SetCurrentDirectory(cwd);
                Directory.Delete(project, true);
            }
        }
    }
}
