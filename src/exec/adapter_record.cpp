#include "exec/adapter_record.hpp"

#include <fmt/format.h>

#include "core/internal.hpp"

namespace weft::detail {

void record_adapters(const Conv &c, ConvRecord &r) {
  std::vector<const AdapterConfig *> seen;
  auto index_of = [&](const AdapterConfigPtr &cfg) -> std::int32_t {
    if (cfg == nullptr) return -1;
    for (std::size_t i = 0; i < seen.size(); ++i) {
      if (seen[i] == cfg.get()) return static_cast<std::int32_t>(i);
    }
    seen.push_back(cfg.get());
    auto &setting = r.adapter_settings.emplace_back();
    for (const AdapterUse &u : cfg->uses) {
      const Adapter::Impl &a = *u.adapter.impl();
      setting.push_back({a.fingerprint, a.name, static_cast<std::uint8_t>(a.kind), u.scale, u.layer_start,
                         u.layer_end});
    }
    return static_cast<std::int32_t>(seen.size() - 1);
  };
  r.adapters_current = index_of(c.adapters);
  r.adapter_end = c.spans.end();
  for (const auto &s : c.spans.spans()) r.adapter_spans.emplace_back(s.start, index_of(s.cfg));
}

ResolvedAdapters resolve_adapters(const ExecutorCore &x, const ConvRecord &r) {
  const Model::Impl &model = *x.model.impl();
  std::vector<AdapterConfigPtr> settings;
  for (const auto &setting : r.adapter_settings) {
    std::vector<AdapterUse> uses;
    for (const AdapterRecord &a : setting) {
      Adapter loaded = find_adapter(model, a.fingerprint);
      if (!loaded) {
        fail(Errc::not_found, fmt::format("the state was decoded under adapter '{}' (fingerprint {:016x}), which is "
                                          "not loaded for this executor's model: Model::load_adapter it first",
                                          a.name, a.fingerprint));
      }
      if (static_cast<std::uint8_t>(loaded.kind()) != a.kind) {
        fail(Errc::corrupt, fmt::format("adapter '{}' (fingerprint {:016x}) is a {} here but was saved as kind {}",
                                        a.name, a.fingerprint, adapter_kind_name(loaded.kind()), a.kind));
      }
      uses.push_back({std::move(loaded), a.scale, a.layer_start, a.layer_end});
    }
    settings.push_back(make_adapter_config(model, uses));
  }
  auto at = [&](std::int32_t i) { return i < 0 ? AdapterConfigPtr{} : settings[static_cast<std::size_t>(i)]; };
  ResolvedAdapters out;
  out.current = at(r.adapters_current);
  std::vector<AdapterSpans::Span> spans;
  for (const auto &[start, i] : r.adapter_spans) spans.push_back({start, at(i)});
  out.spans.assign(std::move(spans), r.adapter_end);
  out.any = !r.adapter_settings.empty();
  return out;
}

}  // namespace weft::detail
