/* C ABI tests: version and status names, parameter defaults, the model
   (load errors, tokenizer, UTF-8 checks, metadata), handle checks, logging. */
#include <stddef.h>
#include "c_api_test.h"

/* --- Tests -------------------------------------------------------------- */

void test_basics(void) {
  CHECK(strlen(weft_version()) >= 5);
  CHECK(strstr(weft_llama_version(), "v0.4.0") != NULL);
  CHECK(strcmp(weft_status_name(WEFT_OK), "ok") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_DISPOSED), "disposed") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_BUFFER_TOO_SMALL), "buffer_too_small") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_INVALID_HANDLE), "invalid_handle") == 0);
  CHECK(strcmp(weft_status_name((weft_status)12345), "unknown") == 0);
  CHECK(strcmp(weft_finish_reason_name(WEFT_FINISH_STOP_STRING), "stop_string") == 0);
  CHECK(strcmp(weft_finish_reason_name(99), "unknown") == 0);
  /* A failure sets the message; the next successful call clears it. */
  CHECK_ERR(weft_model_load(NULL, NULL), WEFT_ERR_NULL_ARG, "weft_model_load: argument `out` is NULL");
  CHECK_OK(weft_set_log_callback(NULL, WEFT_LOG_NONE, NULL, NULL));
  CHECK(strcmp(weft_last_error(), "") == 0);
}

void test_params_init(void) {
  weft_model_params mp;
  weft_executor_params ep;
  weft_sampler_params sp;
  weft_generate_params gp;
  weft_step_budget b;
  weft_worker_params wp;
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  CHECK(mp.struct_size == sizeof mp && mp.use_mmap == 1 && mp.n_gpu_layers == 0 && mp.path == NULL);
  CHECK(mp.rpc_timeout_ms == 5000 && mp.rpc_reply_timeout_ms == 60000);
  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  CHECK(ep.n_ctx == 4096 && ep.n_batch == 512 && ep.n_seq_max == 16 && ep.kv_type == WEFT_KV_F16);
  CHECK(ep.pressure == WEFT_PRESSURE_WAIT && ep.events == 0 && ep.events_capacity == 65536);
  CHECK(ep.spill_ram_bytes == (1ull << 30) && ep.spill_disk_bytes == (8ull << 30) && ep.spill_recompute == 1 &&
        ep.spill_disk_dir == NULL);
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.temperature == 0.0f && sp.top_p == 1.0f && sp.penalty_last_n == 64 && sp.grammar == NULL);
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.max_tokens == 128 && gp.on_token == NULL && gp.n_stop == 0);
  CHECK_OK(weft_step_budget_init(&b, sizeof b));
  CHECK(b.max_tokens == 0 && b.max_time_us == 0 && b.deadline_us == 0);
  CHECK_OK(weft_worker_params_init(&wp, sizeof wp));
  CHECK(wp.idle_wait_ms == 100 && wp.budget == NULL);

  /* Sizes the library does not know, and NULL. */
  CHECK_ERR(weft_executor_params_init(&ep, sizeof ep - 4), WEFT_ERR_STRUCT_SIZE, "weft_executor_params.struct_size");
  CHECK_ERR(weft_model_params_init(&mp, 0), WEFT_ERR_STRUCT_SIZE, "struct_size = 0");
  CHECK_ERR(weft_sampler_params_init(&sp, sizeof sp + 8), WEFT_ERR_STRUCT_SIZE, "sizeof(weft_sampler_params)");
  CHECK_ERR(weft_generate_params_init(NULL, sizeof gp), WEFT_ERR_NULL_ARG, "`params`");
}

static int32_t g_progress_calls = 0;
static int32_t cancel_progress(float progress, void *user_data) {
  (void)progress;
  ++*(int32_t *)user_data;
  return 0;
}

void test_model(void) {
  weft_model_params mp;
  weft_model *m = (weft_model *)&mp; /* must be reset to NULL on failure */
  weft_model_info info;
  weft_token toks[64];
  size_t n = 0, len = 0;
  char text[256];
  int32_t n_vocab = 0;
  weft_bool eog = 0;

  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = "/nonexistent/weft-model.gguf";
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_NOT_FOUND, "/nonexistent/weft-model.gguf");
  CHECK(m == NULL);
  mp.path = NULL;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_NULL_ARG, "path");
  mp.path = "/tmp"; /* a directory is named as one, not "does not exist" */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "'/tmp' is a directory");
  CHECK(m == NULL);
  mp.path = __FILE__; /* a C file is not a GGUF */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_CORRUPT, "");
  mp.path = g_model_path;
  mp.struct_size = 3;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_STRUCT_SIZE, "weft_model_params.struct_size = 3");
  mp.struct_size = sizeof mp;
  mp.on_progress = cancel_progress;
  mp.progress_user_data = &g_progress_calls;
  mp.use_mmap = 0;  /* llama.cpp reports progress while reading */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_CANCELLED, "");
  CHECK(g_progress_calls >= 1);
  mp.on_progress = NULL;
  /* RPC peers (the real ones are tested in C++: tests/core/test_rpc.cpp).
     Windows builds without RPC: a valid list passes the same checks, then
     is refused (docs/BUILDING.md). */
#ifdef _WIN32
#define RPC_PEER_STATUS WEFT_ERR_INVALID_ARGUMENT
#define RPC_PEER_MESSAGE "built without RPC (not supported on Windows)"
#elif defined(WEFT_TEST_NO_RPC) /* a build configured with WEFT_RPC=OFF (tests/dist) */
#define RPC_PEER_STATUS WEFT_ERR_INVALID_ARGUMENT
#define RPC_PEER_MESSAGE "built without ggml's RPC backend"
#else
#define RPC_PEER_STATUS WEFT_ERR_IO
#define RPC_PEER_MESSAGE "unreachable"
#endif
  mp.rpc = "127.0.0.1";
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "'127.0.0.1': no ':port'");
  mp.rpc = "127.0.0.1:1,127.0.0.1:1";
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "twice");
  mp.rpc = "127.0.0.1:1"; /* nothing listens on port 1 */
  CHECK_ERR(weft_model_load(&mp, &m), RPC_PEER_STATUS, RPC_PEER_MESSAGE);
  mp.rpc_timeout_ms = 0;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "rpc_timeout_ms = 0");
  mp.rpc_timeout_ms = 5000;
  mp.rpc_reply_timeout_ms = 0;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "rpc_reply_timeout_ms = 0");
  /* A struct sized before rpc_reply_timeout_ms reads its default (60000): the
     peer check fails first, as with a full struct. */
  mp.struct_size = offsetof(weft_model_params, rpc_reply_timeout_ms);
  CHECK_ERR(weft_model_load(&mp, &m), RPC_PEER_STATUS, RPC_PEER_MESSAGE);
  mp.struct_size = sizeof mp;
  mp.rpc_reply_timeout_ms = 60000;
  /* A struct sized before the rpc fields loads locally. */
  mp.struct_size = offsetof(weft_model_params, rpc);
  mp.use_mmap = 1;
  CHECK_OK(weft_model_load(&mp, &m));
  CHECK_OK(weft_model_free(m));
  mp.struct_size = sizeof mp;
  mp.rpc = NULL;

  m = load_tiny();
  if (!m) return;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(weft_model_get_info(m, &info));
  CHECK(info.n_vocab == 32000 && info.n_layer == 2 && info.n_embd == 64 && info.bos == 1 && info.eos == 2);
  CHECK(info.fingerprint != 0 && info.n_params > 0);
  CHECK(info.memory == WEFT_MODEL_MEMORY_PLAIN && info.sliding_window == 0);
  CHECK(info.tool_format == WEFT_TOOL_FORMAT_HERMES); /* no chat template */
  /* A caller built before tool formats gets the fields before them. */
  memset(&info, 0, sizeof info);
  info.struct_size = offsetof(weft_model_info, tool_format);
  info.tool_format = -7;
  CHECK_OK(weft_model_get_info(m, &info));
  CHECK(info.sliding_window == 0 && info.memory == WEFT_MODEL_MEMORY_PLAIN && info.tool_format == -7);
  /* A caller built before model families gets the fields before them. */
  memset(&info, 0, sizeof info);
  info.struct_size = offsetof(weft_model_info, memory);
  info.memory = -7;
  CHECK_OK(weft_model_get_info(m, &info));
  CHECK(info.n_layer == 2 && info.memory == -7);
  info.struct_size = 1;
  CHECK_ERR(weft_model_get_info(m, &info), WEFT_ERR_STRUCT_SIZE, "weft_model_info");
  CHECK_ERR(weft_model_get_info(m, NULL), WEFT_ERR_NULL_ARG, "");
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  CHECK(n_vocab == 32000);

  /* Size query, then the real call. */
  CHECK_ERR(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, NULL, 0, &n), WEFT_ERR_BUFFER_TOO_SMALL,
            "needs 3 elements");
  CHECK(n == 3);
  CHECK_OK(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, toks, 64, &n));
  CHECK(n == 3 && toks[0] == 1 && toks[1] == 15043 && toks[2] == 3186);
  CHECK_OK(weft_model_tokenize(m, "", 0, 0, NULL, 0, &n));
  CHECK(n == 0);
  CHECK_ERR(weft_model_tokenize(m, NULL, 5, 0, toks, 64, &n), WEFT_ERR_NULL_ARG, "`text`");
  CHECK_ERR(weft_model_tokenize(m, "x", 1, 0x80, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "unknown bits 0x80");
  CHECK_ERR(weft_model_tokenize(m, "x", 1, 0, toks, 64, NULL), WEFT_ERR_NULL_ARG, "out_n");

  /* Invalid UTF-8 is refused with the offset; valid multi-byte text is fine. */
  CHECK_ERR(weft_model_tokenize(m, "\xff", 1, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0 (0xff)");
  CHECK_ERR(weft_model_tokenize(m, "ab\xc0\xaf", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 2");  /* overlong */
  CHECK_ERR(weft_model_tokenize(m, "\xed\xa0\x80", 3, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0"); /* surrogate */
  CHECK_ERR(weft_model_tokenize(m, "ab\xe2\x82", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 2 (0xe2) of 4");
  CHECK_ERR(weft_model_tokenize(m, "\xf4\x90\x80\x80", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0"); /* > U+10FFFF */
  CHECK_OK(weft_model_tokenize(m, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e", 15, 0, toks, 64, &n));
  CHECK(n > 0);

  /* Round trip; text out needs room for the NUL. */
  CHECK_OK(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, toks, 64, &n));
  CHECK_ERR(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, 0, &len), WEFT_ERR_BUFFER_TOO_SMALL,
            "plus a NUL");
  CHECK(len >= 11);
  CHECK_ERR(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, len, &len), WEFT_ERR_BUFFER_TOO_SMALL,
            "");
  CHECK_OK(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, len + 1, &len));
  CHECK(strlen(text) == len && strstr(text, "Hello world") != NULL);
  toks[1] = 32000;
  CHECK_ERR(weft_model_detokenize(m, toks, n, 0, text, sizeof text, &len), WEFT_ERR_OUT_OF_RANGE, "32000");
  CHECK_ERR(weft_model_detokenize(m, NULL, 2, 0, text, sizeof text, &len), WEFT_ERR_NULL_ARG, "tokens");

  CHECK_OK(weft_model_token_piece(m, 15043, 0, text, sizeof text, &len));
  CHECK(strcmp(text, " Hello") == 0 && len == 6);
  CHECK_ERR(weft_model_token_piece(m, -1, 0, text, sizeof text, &len), WEFT_ERR_OUT_OF_RANGE, "-1");
  CHECK_ERR(weft_model_token_piece(m, 5, WEFT_DETOK_REMOVE_SPECIAL, text, sizeof text, &len),
            WEFT_ERR_INVALID_ARGUMENT, "unknown bits");
  CHECK_OK(weft_model_is_eog(m, info.eos, &eog));
  CHECK(eog == 1);
  CHECK_OK(weft_model_is_eog(m, 15043, &eog));
  CHECK(eog == 0);
  CHECK_OK(weft_model_description(m, text, sizeof text, &len));
  CHECK(len > 0 && strstr(text, "llama") != NULL);
  CHECK_OK(weft_model_meta(m, "general.architecture", text, sizeof text, &len));
  CHECK(strcmp(text, "llama") == 0);
  CHECK_OK(weft_model_meta(m, "no.such.key", text, sizeof text, &len));
  CHECK(len == 0 && text[0] == '\0');
  CHECK_ERR(weft_model_meta(m, NULL, text, sizeof text, &len), WEFT_ERR_NULL_ARG, "key");
  CHECK_OK(weft_model_free(m));
}

void test_handles(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  int32_t n_vocab = 0;
  uint32_t n = 0;
  if (!m) return;
  ex = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(ex, &c));

  /* NULL, never-made, wrongly typed and freed handles: refused, not crashed. */
  CHECK_ERR(weft_model_n_vocab(NULL, &n_vocab), WEFT_ERR_NULL_ARG, "weft_model handle is NULL");
  CHECK_ERR(weft_model_n_vocab((weft_model *)(uintptr_t)0x1234, &n_vocab), WEFT_ERR_INVALID_HANDLE, "not live");
  CHECK_ERR(weft_model_n_vocab((const weft_model *)c, &n_vocab), WEFT_ERR_INVALID_HANDLE,
            "is a weft_conversation, not a weft_model");
  CHECK_ERR(weft_conversation_n_tokens((const weft_conversation *)ex, &n), WEFT_ERR_INVALID_HANDLE,
            "is a weft_executor, not a weft_conversation");
  CHECK_OK(weft_model_free(NULL));
  CHECK_OK(weft_conversation_free(c));
  CHECK_ERR(weft_conversation_n_tokens(c, &n), WEFT_ERR_INVALID_HANDLE, "weft_conversation handle");
  CHECK_ERR(weft_conversation_free(c), WEFT_ERR_INVALID_HANDLE, "already freed");
  CHECK_OK(weft_executor_free(ex));
  CHECK_ERR(weft_executor_step(ex, NULL, NULL), WEFT_ERR_INVALID_HANDLE, "weft_executor handle");
  CHECK_OK(weft_model_free(m));
  CHECK_ERR(weft_model_free(m), WEFT_ERR_INVALID_HANDLE, "weft_model handle");
}

/* --- Logging -------------------------------------------------------------- */

typedef struct LogCtx {
  int lines;
  int bad;
} LogCtx;

static void on_log(int32_t level, const char *line, size_t len, void *user_data) {
  LogCtx *l = (LogCtx *)user_data;
  ++l->lines;
  if (level < WEFT_LOG_DEBUG || level > WEFT_LOG_ERROR || strlen(line) != len || memchr(line, '\n', len) != NULL)
    l->bad = 1;
}

void test_log(void) {
  LogCtx ctx = {0, 0};
  weft_model *m;
  g_freed = 0;
  CHECK_ERR(weft_set_log_callback(on_log, 9, &ctx, count_free), WEFT_ERR_INVALID_ARGUMENT, "min_level = 9");
  CHECK(g_freed == 0);
  CHECK_OK(weft_set_log_callback(on_log, WEFT_LOG_DEBUG, &ctx, count_free));
  m = load_tiny(); /* llama.cpp logs the load at info and debug */
  CHECK(ctx.lines > 0 && ctx.bad == 0);
  CHECK_OK(weft_set_log_callback(NULL, WEFT_LOG_NONE, NULL, NULL));
  CHECK(g_freed == 1);
  ctx.lines = 0;
  CHECK_OK(weft_model_free(m));
  m = load_tiny();
  CHECK(ctx.lines == 0);
  CHECK_OK(weft_model_free(m));
}
