// weft/weft.hpp — the whole C++ API in one include.
#pragma once

#include "weft/error.hpp"
#include "weft/log.hpp"
#include "weft/make_model.hpp"
#include "weft/model.hpp"
#include "weft/types.hpp"
#include "weft/version.hpp"
