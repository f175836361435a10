// An NPC that acts: a merchant offered two tools sells through a call the
// game applies to an inventory, the result goes back in, and the merchant
// answers. Checks: every required reply is a call naming a tool with
// arguments its schema allows; without tools there is no call; bad tools are
// refused by name.
using System;
using System.Collections.Generic;
using Weft;

namespace Weft.Samples
{
    internal static class ActionsSample
    {
        private static readonly Tool[] Tools =
        {
            new Tool { Name = "sell_item", Description = "Sell the player an item for gold.",
                       Parameters = "{\"type\": \"object\", \"properties\": {\"item\": {\"enum\": [\"sword\", \"shield\", \"potion\"]}}, " +
                                    "\"required\": [\"item\"], \"additionalProperties\": false}" },
            new Tool { Name = "refuse", Description = "Refuse to trade.",
                       Parameters = "{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}" },
        };

        public static void Run(string modelPath)
        {
            using (var model = Model.Load(modelPath))
            using (var ex = new Executor(model, new ExecutorParams { ContextSize = 2048, BatchSize = 64, MaxSequences = 4, Threads = 2, Events = true }))
            {
                var about = Tool.Prompt(Tools);
                Check.True(about.Contains("sell_item: Sell the player an item for gold.") && about.Contains("<tool_call>"),
                    "Actions: the tools' prompt lists them and the format");
                var inventory = new Dictionary<string, int> { { "sword", 1 }, { "shield", 1 }, { "potion", 3 } };
                int gold = 10, sold = 0;
                for (uint seed = 1; seed <= 4; ++seed)
                {
                    using (var npc = ex.CreateConversation())
                    {
                        npc.Prompt(about + "\nPlayer: I want to buy something.\nMerchant:", addBos: true);
                        using (var g = npc.Generate(new GenerateParams { MaxTokens = 200, Tools = Tools, ToolChoice = ToolChoice.Required,
                                                                          Sampler = new SamplerParams { Temperature = 1.0f, Seed = seed } }))
                        {
                            while (!ex.Step().Idle) { }
                            Check.True(g.Wait(TimeSpan.FromSeconds(60)), "Actions: done");
                            var call = g.ToolCall;
                            Check.True(call != null, "Actions: a required reply is a call");
                            if (call == null) continue;
                            // The same call as an event, just before the generation's Finished.
                            var events = ex.PollEvents();
                            int at = events.FindIndex(e => e.Kind == EventKind.ToolCall);
                            Check.True(at >= 0 && events[at].ToolName == call.Name && events[at].Text == call.Arguments &&
                                       at + 1 < events.Count && events[at + 1].Kind == EventKind.Finished,
                                       "Actions: a ToolCall event before Finished");
                            string result;
                            if (call.Name == "sell_item")
                            {
                                string item = null;
                                foreach (var name in inventory.Keys) if (call.Arguments == "{\"item\":\"" + name + "\"}") item = name;
                                Check.True(item != null, "Actions: sell_item's arguments fit its schema: " + call.Arguments);
                                if (item == null) continue;
                                inventory[item] -= 1;
                                gold += 5;
                                ++sold;
                                result = "{\"sold\": \"" + item + "\", \"gold\": " + gold + "}";
                            }
                            else
                            {
                                Check.Equal("refuse", call.Name, "Actions: a tool it was offered");
                                Check.Equal("{}", call.Arguments, "Actions: refuse takes no arguments");
                                result = "{\"ok\": true}";
                            }
                            Console.WriteLine("  seed " + seed + ": " + call.Name + " " + call.Arguments + " -> " + result);
                            npc.Prompt(Tool.ResultPrompt(result) + "\nMerchant:");
                            using (var reply = npc.Generate(new GenerateParams { MaxTokens = 8 }))
                            {
                                while (!ex.Step().Idle) { }
                                Check.True(reply.Wait(TimeSpan.FromSeconds(60)) && reply.ToolCall == null, "Actions: no tools, no call");
                            }
                        }
                    }
                }
                Console.WriteLine("  sold " + sold + ", gold " + gold);
                // The other call formats: each required reply is a call in it.
                Check.Equal(ToolFormat.Hermes, model.Info.ToolFormat, "Actions: a model without a template calls as hermes");
                foreach (var format in new[] { ToolFormat.Llama3, ToolFormat.Mistral })
                {
                    using (var npc = ex.CreateConversation())
                    {
                        npc.Prompt(Tool.Prompt(Tools, format) + "\nPlayer: I want to buy something.\nMerchant:", addBos: true);
                        using (var g = npc.Generate(new GenerateParams { MaxTokens = 200, Tools = Tools, ToolChoice = ToolChoice.Required,
                                                                          ToolFormat = format, Sampler = new SamplerParams { Temperature = 1.0f, Seed = 7 } }))
                        {
                            while (!ex.Step().Idle) { }
                            Check.True(g.Wait(TimeSpan.FromSeconds(60)) && g.ToolCall != null &&
                                       (g.ToolCall.Name == "sell_item" || g.ToolCall.Name == "refuse"),
                                       "Actions: a required reply is a call in " + format);
                            var text = g.Text;
                            Check.True(format == ToolFormat.Llama3 ? text.StartsWith("{") : text.StartsWith("[TOOL_CALLS]["),
                                       "Actions: written as " + format + ": " + text);
                            Check.True(g.ToolCall.Text(format).StartsWith(format == ToolFormat.Llama3 ? "{\"name\":\"" : "[TOOL_CALLS][{\"name\":\""),
                                       "Actions: the call rendered back in " + format);
                        }
                    }
                }
                Check.Equal("[TOOL_RESULTS]{\"content\": \"a \\\"quote\\\"\"}[/TOOL_RESULTS]",
                            Tool.ResultPrompt("a \"quote\"", ToolFormat.Mistral), "Actions: a mistral result is a JSON string");
                using (var npc = ex.CreateConversation())
                {
                    npc.Prompt("Hello", addBos: true);
                    Check.Throws(Status.InvalidArgument, "name 'sell item'",
                        () => npc.Generate(new GenerateParams { Tools = new[] { new Tool { Name = "sell item" } } }).Dispose(),
                        "Actions: a bad tool name");
                    Check.Throws(Status.InvalidArgument, "parameters is not a JSON object",
                        () => Tool.Prompt(new[] { new Tool { Name = "a", Parameters = "[1]" } }), "Actions: bad parameters");
                }
            }
        }
    }
}
