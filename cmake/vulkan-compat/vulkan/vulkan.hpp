// Vulkan-Hpp as the system has it, plus what the pinned llama.cpp's
// ggml-vulkan.cpp names from newer headers. Debian 12's Vulkan-Headers are
// 1.3.239; VK_EXT_layer_settings came in 1.3.261, and ggml-vulkan.cpp always
// chains a LayerSettingsCreateInfoEXT into vk::InstanceCreateInfo (it asks
// for the extension only with GGML_VK_VALIDATE, never here). Only files that
// include <vulkan/vulkan.hpp> see this: cmake/WeftLlamaCpp.cmake puts this
// directory first on the include path of a WEFT_VULKAN build of llama.cpp
// (keyed by this file's content).
#pragma once
#include_next <vulkan/vulkan.hpp>

#if VK_HEADER_VERSION < 261
#include <cstdint>
#include <vector>

namespace vk {

enum class LayerSettingTypeEXT : int32_t {
  eBool32 = 0,
  eInt32 = 1,
  eInt64 = 2,
  eUint32 = 3,
  eUint64 = 4,
  eFloat32 = 5,
  eFloat64 = 6,
  eString = 7,
};

// Layout of VkLayerSettingEXT.
struct LayerSettingEXT {
  const char *pLayerName;
  const char *pSettingName;
  LayerSettingTypeEXT type;
  uint32_t valueCount;
  const void *pValues;
};

// Layout of VkLayerSettingsCreateInfoEXT (sType
// VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT = 1000496000).
struct LayerSettingsCreateInfoEXT {
  explicit LayerSettingsCreateInfoEXT(const std::vector<LayerSettingEXT> &settings)
      : settingCount(static_cast<uint32_t>(settings.size())), pSettings(settings.data()) {}
  StructureType sType = static_cast<StructureType>(1000496000);
  const void *pNext = nullptr;
  uint32_t settingCount;
  const LayerSettingEXT *pSettings;
};

}  // namespace vk
#endif
