# install.cmake — `cmake --install build [--prefix P]` (docs/install.md).
#
# Installs what a C program needs to use Kiln, and what `kiln compile` needs to write a .so:
#   BINDIR/kiln                                  the tool
#   INCLUDEDIR/kiln/*.h                          the public API
#   LIBDIR/libkiln.so.0 (libkiln.so), libkiln.a  the library, shared and static
#   LIBDIR/libkiln_rt.a, libkiln_gpurt.a         the runtimes that compiled shared objects carry
#   LIBDIR/kiln/aot/                             the runtime's headers that the C of
#                                                kiln_compile_shared includes (found from libkiln.so
#                                                or BINDIR by runtime/driver/aot.c)
#   LIBDIR/pkgconfig/kiln.pc, kiln-static.pc     pkg-config: shared, and static with every dependency
#   LIBDIR/cmake/Kiln/KilnConfig.cmake           find_package(Kiln): Kiln::kiln, Kiln::kiln_static,
#                                                Kiln::kiln_rt, Kiln::tool
# Both routes hand a user the dependencies of the static library (LLVM 16, MLIR's C API,
# SPIRV-Tools, OpenBLAS, protobuf-c, cJSON, the C++ runtime), as found by this configure.
include(CMakePackageConfigHelpers)

set(KILN_VERSION 0.1.0) # kiln_version() (runtime/exec/rt_version.c)
set_target_properties(kiln_shared PROPERTIES VERSION ${KILN_VERSION} SOVERSION 0)
# libkiln.so and the tool need libMLIR.so.16, which is outside the loader's default path
# (/usr/lib/llvm-16/lib): the installed copies keep the directories they were linked against.
set_target_properties(kiln_shared kiln PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kiln_shared kiln_static kiln_rt kiln_gpurt
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

# The headers the generated C of a compiled model includes (codegen/program.h,
# runtime/exec/rt.h, runtime/device/device.h and what they include; test install.aot checks the
# list by compiling a model with the installed tool), with their paths in the source tree.
set(KILN_AOT_HEADERS codegen/kernel.h codegen/program.h ir/kir.h ir/ops.def
    passes/mixed_precision.h passes/passes.h passes/pipeline.h runtime/device/device.h
    runtime/exec/rt.h)
foreach(h ${KILN_AOT_HEADERS})
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${CMAKE_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_LIBDIR}/kiln/aot/${dir})
endforeach()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_LIBDIR}/kiln/aot/include
        FILES_MATCHING PATTERN "*.h")

# The static library's link dependencies, in link order: CMake's list (absolute paths and
# names) for KilnConfig.cmake, and the same as linker flags for kiln-static.pc.
set(KILN_STATIC_DEPS ${KILN_MLIR_LIBS} ${LLVM_LIBRARY} ${OPENBLAS_LIBRARY} ${CJSON_LIBRARY}
    ${PROTOBUF_C_LIBRARY} ${KILN_SPIRV_LIBS} ${KILN_MPI_LIBS} m)
set(KILN_STATIC_LIBS_PC "")
set(KILN_STATIC_RPATH_PC "")
foreach(dep ${KILN_STATIC_DEPS})
  if(IS_ABSOLUTE ${dep})
    string(APPEND KILN_STATIC_LIBS_PC " ${dep}")
    get_filename_component(dir ${dep} DIRECTORY)
    if(dep MATCHES "[.]so$" AND NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      if(NOT " ${KILN_STATIC_RPATH_PC} " MATCHES " -Wl,-rpath,${dir} ")
        string(APPEND KILN_STATIC_RPATH_PC " -Wl,-rpath,${dir}")
      endif()
    endif()
  else()
    string(APPEND KILN_STATIC_LIBS_PC " -l${dep}")
  endif()
endforeach()
string(APPEND KILN_STATIC_LIBS_PC " -pthread${KILN_STATIC_RPATH_PC}")
set(KILN_RT_LIBS_PC "${OPENBLAS_LIBRARY} -lm -pthread")

# pkg-config files locate the prefix from their own directory, so an installed tree can move.
file(RELATIVE_PATH KILN_PC_PREFIX_REL ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" KILN_PC_PREFIX_REL "${KILN_PC_PREFIX_REL}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/kiln.pc.in ${CMAKE_BINARY_DIR}/pkgconfig/kiln.pc @ONLY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/kiln-static.pc.in ${CMAKE_BINARY_DIR}/pkgconfig/kiln-static.pc
               @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/pkgconfig/kiln.pc ${CMAKE_BINARY_DIR}/pkgconfig/kiln-static.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/KilnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/KilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR
                                        CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/KilnConfigVersion.cmake
                                 VERSION ${KILN_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/KilnConfig.cmake
        ${CMAKE_BINARY_DIR}/cmake/KilnConfigVersion.cmake DESTINATION ${KILN_CMAKE_DIR})
