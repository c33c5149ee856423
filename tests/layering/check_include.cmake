# Compiles probe.cpp with the include views of one layer (Note [include views] in
# src/CMakeLists.txt) and checks the outcome:
#   EXPECT=ok       the header is the layer's own or below it: it must compile;
#   EXPECT=missing  the header belongs to a layer above: the compiler must not find it.
# cmake -DCOMPILER=... -DVIEWS="dir;dir" -DHEADER=comm/work.h -DEXPECT=ok -DPROBE=... -P
set(flags -std=c++20 -fsyntax-only "-DHEADER=\"${HEADER}\"")
foreach(v ${VIEWS})
  list(APPEND flags -I${v})
endforeach()
foreach(d ${SYSTEM})
  list(APPEND flags -isystem ${d})
endforeach()
execute_process(COMMAND ${COMPILER} ${flags} ${PROBE} RESULT_VARIABLE rc ERROR_VARIABLE err
                OUTPUT_QUIET)
if(EXPECT STREQUAL "ok")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${HEADER} should compile with ${VIEWS}:\n${err}")
  endif()
elseif(rc EQUAL 0 OR NOT err MATCHES "${HEADER}: No such file")
  message(FATAL_ERROR "${HEADER} must not be reachable from ${VIEWS} (rc ${rc}):\n${err}")
endif()
