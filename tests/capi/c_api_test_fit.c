/* weft_fit_choose: the choice for a budget loads and decodes; the least
   configuration's own bytes fit and one byte less is refused by name; bad
   arguments. On a build without a GPU backend (every one this test runs
   in), the device side is empty. */
#include "c_api_test.h"

void test_fit(void) {
  weft_fit_params p;
  weft_fit_result r, least;
  weft_model_params mp;
  weft_model *model = NULL;
  weft_executor_params ep;
  weft_executor *ex = NULL;
  weft_conversation *conv = NULL;
  weft_step_result step;
  char needle[64];
  int i;

  CHECK_OK(weft_fit_params_init(&p, sizeof p));
  CHECK(p.n_ctx == 4096 && p.min_n_ctx == 256 && p.spill_ram_bytes == (1ull << 30));
  p.host_bytes = 1ull << 34;
  p.spill_ram_bytes = 0;
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 4;
  p.flash_attn = WEFT_FLASH_ATTN_DISABLED;
  r.struct_size = sizeof r;
  CHECK_OK(weft_fit_choose(g_model_path, &p, &r));
  CHECK(r.n_ctx == 1024 && r.n_batch == 64 && r.n_gpu_layers == 0 && r.n_layer == 2);
  /* tiny: 2 layers, K and V of 2 heads 16 wide, f16: 256 bytes a cell. */
  CHECK(r.host.kv == 1024u * 256u);
  CHECK(r.host.total == r.host.weights + r.host.kv + r.host.compute + r.host.spill);
  CHECK(r.device.total == 0);

  /* The choice loads and decodes. */
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = g_model_path;
  mp.n_gpu_layers = r.n_gpu_layers;
  CHECK_OK(weft_model_load(&mp, &model));
  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  ep.n_ctx = r.n_ctx;
  ep.n_batch = r.n_batch;
  ep.n_seq_max = 4;
  ep.n_threads = 2;
  ep.spill_ram_bytes = 0;
  CHECK_OK(weft_executor_create(model, &ep, &ex));
  CHECK_OK(weft_conversation_create(ex, &conv));
  CHECK_OK(weft_conversation_prompt_text(conv, "The choice decodes", 18, WEFT_TEXT_ADD_BOS));
  step.struct_size = sizeof step;
  for (i = 0; i < 100; ++i) {
    CHECK_OK(weft_executor_step(ex, NULL, &step));
    if (step.idle) break;
  }
  {
    weft_bool has = 0;
    CHECK_OK(weft_conversation_has_logits(conv, &has));
    CHECK(has);
  }
  weft_conversation_free(conv);
  weft_executor_free(ex);
  weft_model_free(model);

  /* The least (min_n_ctx cells) fits exactly; one byte less is refused. */
  p.n_ctx = 256;
  least.struct_size = sizeof least;
  CHECK_OK(weft_fit_choose(g_model_path, &p, &least));
  p.n_ctx = 1024;
  p.host_bytes = least.host.total;
  CHECK_OK(weft_fit_choose(g_model_path, &p, &r));
  CHECK(r.n_ctx == 256);
  p.host_bytes = least.host.total - 1;
  snprintf(needle, sizeof needle, "the fewest host bytes %llu", (unsigned long long)least.host.total);
  CHECK_ERR(weft_fit_choose(g_model_path, &p, &r), WEFT_ERR_OUT_OF_RANGE, needle);

  /* Bad arguments. */
  p.host_bytes = 1ull << 34;
  CHECK_ERR(weft_fit_choose(NULL, &p, &r), WEFT_ERR_NULL_ARG, "model_path");
  CHECK_ERR(weft_fit_choose(g_model_path, &p, NULL), WEFT_ERR_NULL_ARG, "out");
  r.struct_size = 3;
  CHECK_ERR(weft_fit_choose(g_model_path, &p, &r), WEFT_ERR_STRUCT_SIZE, "weft_fit_result");
  r.struct_size = sizeof r;
  p.kv_type = 99;
  CHECK_ERR(weft_fit_choose(g_model_path, &p, &r), WEFT_ERR_INVALID_ARGUMENT, "weft_fit_params.kv_type = 99");
  p.kv_type = WEFT_KV_F16;
  p.min_n_ctx = 2048;
  CHECK_ERR(weft_fit_choose(g_model_path, &p, &r), WEFT_ERR_INVALID_ARGUMENT, "min_n_ctx = 2048");
  CHECK_ERR(weft_fit_choose("/nonexistent/model.gguf", NULL, &r), WEFT_ERR_NOT_FOUND, "/nonexistent/model.gguf");
}
