# `cmake --install`: the tandem program, libtandem.so with every layer's headers and a CMake
# package (find_package(tandem) gives tandem::tandem), and the GPU plug-in; `cpack` makes a
# Debian package of them (docs/INSTALL.md). Components: runtime (the program and the
# libraries), dev (headers, the CMake package, the libtandem.so link) and gpu (the
# plug-in, whose CUDA libraries no Debian package provides).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tandem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS tandem_shared EXPORT tandemTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
if(TARGET tandem_gpu)
  install(TARGETS tandem_gpu LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT gpu)
endif()

# The layers' headers under include/tandem, as the sources include them ("comm/work.h").
# The GPU parts' and the mpi backend's stay out: they include toolkit headers (CUDA, MPI)
# and are reached through the registries, not by name.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem
        COMPONENT dev FILES_MATCHING PATTERN "*.h"
        PATTERN "cuda" EXCLUDE PATTERN "gpu" EXCLUDE PATTERN "device" EXCLUDE
        PATTERN "nccl" EXCLUDE PATTERN "mpi" EXCLUDE)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
install(EXPORT tandemTargets NAMESPACE tandem:: DESTINATION ${config_dir} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tandemConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/tandemConfig.cmake
                              INSTALL_DESTINATION ${config_dir}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tandemConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tandemConfig.cmake ${CMAKE_BINARY_DIR}/tandemConfigVersion.cmake
        DESTINATION ${config_dir} COMPONENT dev)

# cpack -G DEB: one package of runtime and dev, its dependencies from the libraries it
# links (dpkg-shlibdeps). The plug-in is left out: it needs the CUDA toolkit's libraries,
# which no Debian package provides (-DTANDEM_PACKAGE_GPU=ON packs it anyway, for machines
# that have the toolkit where this one had it).
option(TANDEM_PACKAGE_GPU "Put the GPU plug-in in the Debian package" OFF)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VENDOR "tandem")
set(CPACK_PACKAGE_CONTACT "tandem developers <tandem@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "runs, measures and explains compute-communication overlap in distributed training")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL runtime dev)
if(TANDEM_PACKAGE_GPU AND TARGET tandem_gpu)
  list(APPEND CPACK_COMPONENTS_ALL gpu)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
# Where dpkg-shlibdeps finds libtandem.so for the program that links it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
# Building against it: the headers include nlohmann/json.hpp and zlib.h.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "nlohmann-json3-dev, zlib1g-dev, cmake, g++")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
include(CPack)
