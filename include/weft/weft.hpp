// weft/weft.hpp — the whole runtime API in one include. Model generation
// and training (weft/make_model.hpp, weft/train.hpp) are apart, in the
// weft_modelgen library (CMake target weft::modelgen).
#pragma once

#include "weft/adapter.hpp"
#include "weft/backend.hpp"
#include "weft/cache.hpp"
#include "weft/compaction.hpp"
#include "weft/conversation.hpp"
#include "weft/embedding.hpp"
#include "weft/error.hpp"
#include "weft/executor.hpp"
#include "weft/generation.hpp"
#include "weft/json_schema.hpp"
#include "weft/log.hpp"
#include "weft/memory.hpp"
#include "weft/memory_fit.hpp"
#include "weft/model.hpp"
#include "weft/projector.hpp"
#include "weft/sampling.hpp"
#include "weft/types.hpp"
#include "weft/version.hpp"
