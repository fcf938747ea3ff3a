# Build helpers: one library helper and one test helper, deps listed explicitly.
#
# Two variants of every shipped library. Crash points (base/crash_point.h) and mutation
# switches (base/mutation.h) exist only in the testing variant, so no process linking the
# release library can be killed by UMAP_CRASH_AT or have its CRC checks turned off:
#   <name>          release: what libumap and the installed tools are made of;
#   <name>_testing  testing: linked by tests/ and chaos/ (umap_cc_test does it for its DEPS).
# Only the files that contain a switch (SWITCHED_SRCS) are compiled twice, once with
# UMAP_TEST_SWITCHES=0 and once with =1; every other file is compiled once, into an object
# library that both variants share. A file with a switch that is not listed in
# SWITCHED_SRCS does not build (the headers refuse when UMAP_TEST_SWITCHES is undefined).

# Everything compiled against a testing variant sees UMAP_TEST_SWITCHES=1.
add_library(umap_test_switches INTERFACE)
target_compile_definitions(umap_test_switches INTERFACE UMAP_TEST_SWITCHES=1)

# The testing variant of each dependency that has one.
function(umap_testing_deps out)
  set(mapped)
  foreach(dep IN LISTS ARGN)
    if(TARGET ${dep}_testing)
      list(APPEND mapped ${dep}_testing)
    else()
      list(APPEND mapped ${dep})
    endif()
  endforeach()
  set(${out} ${mapped} PARENT_SCOPE)
endfunction()

# umap_cc_library(NAME name SRCS ... [SWITCHED_SRCS ...] [TESTING_SRCS ...] [TESTONLY]
#                 DEPS ... PUBLIC_DEPS ...)
#   SRCS           compiled once, shared by both variants;
#   SWITCHED_SRCS  files with crash points or mutation switches: compiled per variant;
#   TESTING_SRCS   in the testing variant only (the switches' own implementation);
#   TESTONLY       a test-only library (fault injection, the chaos harness): one target,
#                  `name`, built against the testing variants of its deps. Never shipped.
# A shipped library records its release objects and its non-umap deps in the target
# properties UMAP_RELEASE_OBJECTS and UMAP_EXTERNAL_DEPS: libumap is made of and links those
# (cmake/UmapPackage.cmake).
function(umap_cc_library)
  cmake_parse_arguments(U "TESTONLY" "NAME" "SRCS;SWITCHED_SRCS;TESTING_SRCS;DEPS;PUBLIC_DEPS"
                        ${ARGN})
  if(U_TESTONLY)
    umap_testing_deps(public_deps ${U_PUBLIC_DEPS})
    umap_testing_deps(deps ${U_DEPS})
    add_library(${U_NAME} STATIC ${U_SRCS} ${U_SWITCHED_SRCS} ${U_TESTING_SRCS})
    target_link_libraries(${U_NAME} PUBLIC ${public_deps} umap_test_switches PRIVATE ${deps})
    return()
  endif()

  set(release_objects)
  set(shared_objects)
  if(U_SRCS)
    add_library(${U_NAME}_objs OBJECT ${U_SRCS})
    target_link_libraries(${U_NAME}_objs PUBLIC ${U_PUBLIC_DEPS} PRIVATE ${U_DEPS})
    set(shared_objects $<TARGET_OBJECTS:${U_NAME}_objs>)
  endif()
  if(U_SWITCHED_SRCS)
    add_library(${U_NAME}_release_objs OBJECT ${U_SWITCHED_SRCS})
    target_link_libraries(${U_NAME}_release_objs PUBLIC ${U_PUBLIC_DEPS} PRIVATE ${U_DEPS})
    target_compile_definitions(${U_NAME}_release_objs PRIVATE UMAP_TEST_SWITCHES=0)
    list(APPEND release_objects $<TARGET_OBJECTS:${U_NAME}_release_objs>)
  endif()

  set(all_release_objects ${shared_objects} ${release_objects})
  add_library(${U_NAME} STATIC ${all_release_objects})
  target_link_libraries(${U_NAME} PUBLIC ${U_PUBLIC_DEPS} PRIVATE ${U_DEPS})
  set(external_deps)
  foreach(dep IN LISTS U_PUBLIC_DEPS U_DEPS)
    if(NOT dep MATCHES "^umap_")
      list(APPEND external_deps ${dep})
    endif()
  endforeach()
  set_target_properties(${U_NAME} PROPERTIES
    UMAP_RELEASE_OBJECTS "${all_release_objects}"
    UMAP_EXTERNAL_DEPS "${external_deps}")

  umap_testing_deps(public_deps ${U_PUBLIC_DEPS})
  umap_testing_deps(deps ${U_DEPS})
  add_library(${U_NAME}_testing STATIC ${shared_objects} ${U_SWITCHED_SRCS} ${U_TESTING_SRCS})
  target_link_libraries(${U_NAME}_testing PUBLIC ${public_deps} umap_test_switches
                        PRIVATE ${deps})

endfunction()

# umap_cc_test(NAME name SRCS ... DEPS ... [LABELS ...] [TIMEOUT s] [COST c]): a GoogleTest
# binary, each TEST registered with ctest through gtest_discover_tests. It links the testing
# variant of each of DEPS. COST is about the seconds one of its tests takes: without timings
# of its own (a fresh clone, as in CI) ctest -j starts the costliest tests first, so that a
# long one does not run alone at the end.
function(umap_cc_test)
  cmake_parse_arguments(U "" "NAME;TIMEOUT;COST" "SRCS;DEPS;LABELS" ${ARGN})
  umap_testing_deps(deps ${U_DEPS})
  add_executable(${U_NAME} ${U_SRCS})
  target_link_libraries(${U_NAME} PRIVATE ${deps} umap_testing umap_test_switches
                        GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT U_TIMEOUT)
    set(U_TIMEOUT 300)
  endif()
  if(NOT U_COST)
    set(U_COST 0)
  endif()
  gtest_discover_tests(${U_NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT ${U_TIMEOUT} LABELS "${U_LABELS}" COST ${U_COST})
endfunction()

# The targets a directory defines, and those of its subdirectories.
function(_umap_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _umap_targets_below(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Fails the configure step when a target's link closure holds both variants of a library:
# the linker would then take each object from whichever archive comes first, mixing
# release and testing objects (a crash point that never fires, a mutation half applied).
function(umap_check_variants)
  _umap_targets_below(${CMAKE_SOURCE_DIR} all)
  foreach(target IN LISTS all)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "EXECUTABLE|LIBRARY")
      continue()
    endif()
    set(seen)
    set(queue ${target})
    while(queue)
      list(POP_FRONT queue t)
      if(NOT TARGET ${t} OR t IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${t})
      get_target_property(imported ${t} IMPORTED)
      if(imported)
        continue()
      endif()
      get_target_property(t_type ${t} TYPE)
      set(links)
      if(NOT t_type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(links ${t} LINK_LIBRARIES)
      endif()
      get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
      foreach(l IN LISTS links iface)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" l "${l}")
        if(l AND TARGET ${l})
          list(APPEND queue ${l})
        endif()
      endforeach()
    endwhile()
    foreach(t IN LISTS seen)
      if(TARGET ${t}_testing AND ${t}_testing IN_LIST seen)
        message(FATAL_ERROR "${target} links both ${t} and ${t}_testing: link one variant "
                            "(tests and chaos the _testing one; see cmake/UmapHelpers.cmake)")
      endif()
    endforeach()
  endforeach()
endfunction()
