// Helpers of the M-RoPE image tests (test_images_mrope*.cpp): scenes of
// text and images on the qwen2vl fixture, and references for them.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "exec/media/image_fixture.hpp"
#include "reference.hpp"

#ifdef WEFT_HAVE_MTMD
namespace mrope_test {

using namespace img_test;
using weft_test::random_tokens;

inline const Fixture &qwen() { return fixture(Kind::qwen2vl); }

inline Rgb image(std::mt19937 &rng) {
  // Grids of 1 .. 8 cells a side, rarely square: n_pos = max(nx, ny).
  return random_image(rng, 20 + static_cast<std::uint32_t>(rng() % 200), 20 + static_cast<std::uint32_t>(rng() % 200));
}

// Text, image, text, and sometimes a second image and text.
struct Scene {
  std::vector<std::vector<weft::Token>> text;  // one more than images
  std::vector<Rgb> imgs;
  std::vector<ImageParts> parts;
  std::vector<Part> input() const {
    std::vector<Part> out = {text[0]};
    for (std::size_t i = 0; i < imgs.size(); ++i) {
      out.insert(out.end(), {parts[i].before, parts[i].image, parts[i].after, text[i + 1]});
    }
    return out;
  }
};

inline Scene scene(std::mt19937 &rng, int n_images) {
  const auto &m = qwen().model;
  Scene s;
  s.text.push_back(random_tokens(rng, m, 3 + static_cast<int>(rng() % 30), true));
  for (int i = 0; i < n_images; ++i) {
    s.imgs.push_back(image(rng));
    s.parts.push_back(tokenize(s.imgs.back(), qwen()));
    s.text.push_back(random_tokens(rng, m, 1 + static_cast<int>(rng() % 20)));
  }
  return s;
}

// Text (n_before tokens, BOS first), one w x h image, text (n_after).
inline Scene one_image(std::mt19937 &rng, int n_before, std::uint32_t w, std::uint32_t h, int n_after) {
  Scene s;
  s.text.push_back(random_tokens(rng, qwen().model, n_before, true));
  s.imgs.push_back(random_image(rng, w, h));
  s.parts.push_back(tokenize(s.imgs.back(), qwen()));
  s.text.push_back(random_tokens(rng, qwen().model, n_after));
  return s;
}

inline weft::Conversation prompt_scene(weft::Executor &ex, const Scene &s) {
  auto c = ex.create();
  c.prompt(s.text[0]);
  for (std::size_t i = 0; i < s.imgs.size(); ++i) {
    c.prompt_image(s.imgs[i].w, s.imgs[i].h, s.imgs[i].px);
    c.prompt(s.text[i + 1]);
  }
  return c;
}

inline std::vector<weft::Conversation> neighbours(weft::Executor &ex, std::mt19937 &rng, int n,
                                           std::vector<std::vector<weft::Token>> *text = nullptr) {
  std::vector<weft::Conversation> out;
  for (int i = 0; i < n; ++i) {
    auto t = random_tokens(rng, qwen().model, 1 + static_cast<int>(rng() % 80), rng() % 2 == 0);
    out.push_back(ex.create());
    out.back().prompt(t);
    if (text != nullptr) text->push_back(std::move(t));
  }
  return out;
}

inline std::vector<float> ref(const std::vector<Part> &input) { return reference(input, 64, {}, nullptr, qwen()); }

inline void expect(const weft::Conversation &c, const std::vector<Part> &input, const std::string &what,
            double *worst = nullptr) {
  expect_logits(c, ref(input), what, worst, qwen());
}


}  // namespace mrope_test
#endif  // WEFT_HAVE_MTMD
