# umap_cc_library(NAME name SRCS ... DEPS ...): one target per component, deps explicit.
function(umap_cc_library)
  cmake_parse_arguments(U "" "NAME" "SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${U_NAME} STATIC ${U_SRCS})
  target_link_libraries(${U_NAME} PUBLIC ${U_PUBLIC_DEPS} PRIVATE ${U_DEPS})
endfunction()

# umap_cc_test(NAME name SRCS ... DEPS ... [LABELS ...] [TIMEOUT s]): a GoogleTest binary,
# each TEST registered with ctest through gtest_discover_tests.
function(umap_cc_test)
  cmake_parse_arguments(U "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${U_NAME} ${U_SRCS})
  target_link_libraries(${U_NAME} PRIVATE ${U_DEPS} umap_testing GTest::gtest GTest::gmock
                        GTest::gtest_main)
  if(NOT U_TIMEOUT)
    set(U_TIMEOUT 300)
  endif()
  gtest_discover_tests(${U_NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT ${U_TIMEOUT} LABELS "${U_LABELS}")
endfunction()
