# cmake -DDEST=dir -DPACKAGE=node-llama-cpp@x -DINTEGRITY=sha512-... -DCOMMIT=sha -P WeftFetchLlama.cmake
# Fetches the npm package that carries llama.cpp as a git bundle, checks its
# integrity, and clones the bundle at the pinned commit into DEST.
foreach(v DEST PACKAGE INTEGRITY COMMIT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "WeftFetchLlama.cmake needs -D${v}=...")
  endif()
endforeach()

find_program(NPM npm)
find_program(GIT git)
if(NOT NPM OR NOT GIT)
  message(FATAL_ERROR "weft needs `npm` and `git` to fetch llama.cpp ${PACKAGE} from the npm registry "
    "(Debian: apt-get install npm git), or a llama.cpp of your own: -DWEFT_LLAMA_SOURCE_DIR=... / -DWEFT_LLAMA_PREFIX=...")
endif()

string(REGEX MATCH "^sha512-(.+)$" _ "${INTEGRITY}")
if(NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "weft: integrity '${INTEGRITY}' is not of the form sha512-<base64>")
endif()

set(work "${DEST}.partial")
file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}")
message(STATUS "weft: fetching ${PACKAGE} from the npm registry (about 35 MB)")
execute_process(
  COMMAND "${NPM}" pack "${PACKAGE}" --pack-destination "${work}" --json --silent
          --fetch-timeout=60000 --fetch-retries=1
  WORKING_DIRECTORY "${work}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 900)
file(GLOB tgz "${work}/*.tgz")
if(NOT rc EQUAL 0 OR NOT tgz)
  string(STRIP "${err}" err)
  message(FATAL_ERROR "weft could not fetch ${PACKAGE} from the npm registry (npm exit: ${rc}).\n"
    "It needs the npm registry reachable (npm config get registry) to get the pinned llama.cpp source.\n"
    "npm said: ${err}")
endif()

# npm integrity is base64(sha512); compare in hex.
file(SHA512 "${tgz}" actual_hex)
file(WRITE "${work}/want.b64" "${CMAKE_MATCH_1}")
execute_process(COMMAND sh -c "base64 -d '${work}/want.b64' | od -An -v -tx1 | tr -d ' \\n'"
                OUTPUT_VARIABLE want_hex RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT want_hex STREQUAL actual_hex)
  file(REMOVE_RECURSE "${work}")
  message(FATAL_ERROR "weft: integrity check failed for ${PACKAGE}:\n  expected ${INTEGRITY}\n  sha512 of download ${actual_hex}\n"
    "The download was discarded. If you meant to change the pin, set WEFT_LLAMA_INTEGRITY.")
endif()

file(ARCHIVE_EXTRACT INPUT "${tgz}" DESTINATION "${work}" PATTERNS "package/llama/gitRelease.bundle")
set(bundle "${work}/package/llama/gitRelease.bundle")
if(NOT EXISTS "${bundle}")
  message(FATAL_ERROR "weft: ${PACKAGE} carries no package/llama/gitRelease.bundle")
endif()
execute_process(COMMAND "${GIT}" -c advice.detachedHead=false clone --quiet "${bundle}" "${work}/src"
                RESULT_VARIABLE rc)
if(rc EQUAL 0)
  execute_process(COMMAND "${GIT}" -C "${work}/src" -c advice.detachedHead=false checkout --quiet "${COMMIT}"
                  RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "weft: the bundle in ${PACKAGE} does not hold commit ${COMMIT}")
endif()
file(WRITE "${work}/src/.weft-verified" "${PACKAGE} ${INTEGRITY} ${COMMIT}\n")
file(REMOVE_RECURSE "${DEST}")
file(RENAME "${work}/src" "${DEST}")
file(REMOVE_RECURSE "${work}")
message(STATUS "weft: llama.cpp ${COMMIT} ready in ${DEST}")
