# The installable library and its packaging: libumap.so / libumap.a bundling the release
# variants of our components, install rules, umap.pc, the CMake package (umap::umap), man
# pages rendered from docs/ with pandoc, and a Debian package (CPack) in three components:
#   library  libumap0      libumap.so.<SOVERSION> and its real file
#   dev      libumap-dev   include/umap/ (the C API and the C++ RAII header), libumap.so,
#                          libumap.a, umap.pc, lib/cmake/umap/, umap(3)
#   tools    umap-tools    umap-recover, umap-stat, umap-ctl and umap-bench, their man pages
# Included by the top-level CMakeLists.txt after every component is defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The soname's number: bump it with any incompatible change of include/umap/umap.h or
# umap_types.h (a struct layout, a signature, a removed function).
set(UMAP_SOVERSION 0)
set(UMAP_VERSION_SCRIPT ${PROJECT_SOURCE_DIR}/cmake/libumap.map)

# What libumap is made of, in dependency order: the release objects of these components.
set(UMAP_BUNDLED_COMPONENTS umap_base umap_journal umap_recovery umap_runtime)
set(umap_objects)
set(umap_external_deps)
foreach(component IN LISTS UMAP_BUNDLED_COMPONENTS)
  get_target_property(objects ${component} UMAP_RELEASE_OBJECTS)
  get_target_property(deps ${component} UMAP_EXTERNAL_DEPS)
  list(APPEND umap_objects ${objects})
  list(APPEND umap_external_deps ${deps})
endforeach()
list(REMOVE_DUPLICATES umap_external_deps)

set(umap_public_include $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# libumap.so: exports only the C API (the version script), so none of RocksDB's, Abseil's or
# our own C++ symbols can clash with a program's; its dependencies are Debian's shared libs.
add_library(umap_shared SHARED ${umap_objects})
target_link_libraries(umap_shared PRIVATE ${umap_external_deps})
target_include_directories(umap_shared INTERFACE ${umap_public_include})
target_link_options(umap_shared PRIVATE "LINKER:--version-script=${UMAP_VERSION_SCRIPT}"
                    "LINKER:--no-undefined")
set_target_properties(umap_shared PROPERTIES
  OUTPUT_NAME umap
  VERSION ${PROJECT_VERSION}
  SOVERSION ${UMAP_SOVERSION}
  EXPORT_NAME umap
  LINK_DEPENDS ${UMAP_VERSION_SCRIPT}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

# libumap.a: the same objects for static linking (its dependencies stay shared: umap.pc's
# Libs.private lists them).
add_library(umap_static STATIC ${umap_objects})
target_link_libraries(umap_static PRIVATE ${umap_external_deps})
target_include_directories(umap_static INTERFACE ${umap_public_include})
set_target_properties(umap_static PROPERTIES
  OUTPUT_NAME umap
  EXPORT_NAME umap_static
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

# --- Man pages, rendered from docs/ at build time --------------------------------------------
option(UMAP_MANPAGES "Render the man pages from docs/*.md with pandoc" ON)
set(UMAP_MAN_PAGES umap-recover.1 umap-stat.1 umap.3)
if(UMAP_MANPAGES)
  find_program(PANDOC_EXECUTABLE pandoc)
  if(NOT PANDOC_EXECUTABLE)
    message(FATAL_ERROR "pandoc renders the man pages (Debian: apt-get install pandoc; "
                        "scripts/install-deps.sh installs it); or configure with "
                        "-DUMAP_MANPAGES=OFF")
  endif()
  set(man_outputs)
  foreach(page IN LISTS UMAP_MAN_PAGES)
    set(src ${PROJECT_SOURCE_DIR}/docs/${page}.md)
    set(out ${CMAKE_BINARY_DIR}/man/${page})
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${PANDOC_EXECUTABLE} --standalone --from markdown --to man ${src} -o ${out}
      DEPENDS ${src}
      COMMENT "Rendering the man page ${page} from docs/${page}.md"
      VERBATIM)
    list(APPEND man_outputs ${out})
  endforeach()
  add_custom_target(umap_man ALL DEPENDS ${man_outputs})
  install(FILES ${CMAKE_BINARY_DIR}/man/umap-recover.1 ${CMAKE_BINARY_DIR}/man/umap-stat.1
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
  install(FILES ${CMAKE_BINARY_DIR}/man/umap.3
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man3 COMPONENT dev)
endif()

# --- Install rules ---------------------------------------------------------------------------
install(TARGETS umap_shared EXPORT umapTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library NAMELINK_COMPONENT dev)
install(TARGETS umap_static EXPORT umapStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# The public headers. include/umap/env.h stays out: it is the internal backend interface,
# nothing in the installed API takes an Env, and libumap exports no C++ symbol.
install(FILES ${PROJECT_SOURCE_DIR}/include/umap/umap.h ${PROJECT_SOURCE_DIR}/include/umap/umap_types.h
              ${PROJECT_SOURCE_DIR}/include/umap/umap.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/umap COMPONENT dev)
# The user tools: release builds only (never a *-testing binary).
install(TARGETS umap-recover umap-stat umap-ctl umap-bench
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT tools)
# The LD_PRELOAD shim for unmodified programs (docs/preload.md): a plugin, not a library to
# link against, so no soname link; it goes with the runtime library.
install(TARGETS umap_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)

# umap.pc. Relocatable: the prefix is found from the .pc file's own place. Libs.private is
# what a static link of libumap.a needs besides it, taken from the dependencies' .pc files.
set(pc_modules)
set(pc_extra_private "-lstdc++ -lm")
foreach(dep IN LISTS umap_external_deps)
  if(dep MATCHES "^absl::(.*)$")
    list(APPEND pc_modules absl_${CMAKE_MATCH_1})
  elseif(dep STREQUAL "RocksDB::rocksdb-shared")
    list(APPEND pc_modules rocksdb)
  elseif(dep STREQUAL "PkgConfig::URING")
    list(APPEND pc_modules liburing)
  elseif(dep STREQUAL "PkgConfig::ISAL")
    list(APPEND pc_modules libisal)
  elseif(dep STREQUAL "Threads::Threads")
    string(APPEND pc_extra_private " -pthread")
  else()
    message(FATAL_ERROR "umap.pc: no pkg-config module known for ${dep} (cmake/UmapPackage.cmake)")
  endif()
endforeach()
execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --libs --static ${pc_modules}
                OUTPUT_VARIABLE pc_static_libs OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE pc_rc)
if(NOT pc_rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --libs --static ${pc_modules} failed")
endif()
set(UMAP_PC_LIBS_PRIVATE "${pc_static_libs} ${pc_extra_private}")
file(RELATIVE_PATH UMAP_PC_PREFIX_FROM_PCDIR
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" UMAP_PC_PREFIX_FROM_PCDIR "${UMAP_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/umap.pc.in ${CMAKE_BINARY_DIR}/umap.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/umap.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# The CMake package: find_package(umap) gives umap::umap (the shared library, nothing else to
# find); find_package(umap COMPONENTS static) also umap::umap_static, after finding what a
# static link needs (Abseil, RocksDB, liburing and ISA-L).
set(UMAP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/umap)
install(EXPORT umapTargets NAMESPACE umap:: DESTINATION ${UMAP_CMAKE_DIR} COMPONENT dev)
install(EXPORT umapStaticTargets NAMESPACE umap:: DESTINATION ${UMAP_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/umapConfig.cmake.in
  ${CMAKE_BINARY_DIR}/umapConfig.cmake INSTALL_DESTINATION ${UMAP_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/umapConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/umapConfig.cmake ${CMAKE_BINARY_DIR}/umapConfigVersion.cmake
        DESTINATION ${UMAP_CMAKE_DIR} COMPONENT dev)

# --- The Debian package ----------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME umap)
set(CPACK_PACKAGE_VENDOR "Umap")
set(CPACK_PACKAGE_CONTACT "Umap maintainers <umap-maintainers@invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "mmap() for large files on distributed file systems, with a crash-safe journal")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL library dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_LIBRARY_PACKAGE_NAME libumap${UMAP_SOVERSION})
set(CPACK_DEBIAN_LIBRARY_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libumap-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# libumap.a links against these (umap.pc's Libs.private); the shared library needs none.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "librocksdb-dev, liburing-dev, libisal-dev, libabsl-dev")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME umap-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
include(CPack)
cpack_add_component(library DISPLAY_NAME "libumap shared library")
cpack_add_component(dev DISPLAY_NAME "libumap development files" DEPENDS library)
cpack_add_component(tools DISPLAY_NAME "umap-recover, umap-stat, umap-ctl and umap-bench")
