// weft/weft.hpp — the whole C++ API in one include.
#pragma once

#include "weft/conversation.hpp"
#include "weft/error.hpp"
#include "weft/executor.hpp"
#include "weft/generation.hpp"
#include "weft/log.hpp"
#include "weft/make_model.hpp"
#include "weft/model.hpp"
#include "weft/sampling.hpp"
#include "weft/train.hpp"
#include "weft/types.hpp"
#include "weft/version.hpp"
