# package.cmake — what `cmake --install` puts where, and the Debian package
# made of it (`cpack -G DEB` in the build directory; scripts/build.sh package).
#
# The package holds the preload library, the sockswitch command (cli/
# installs it), the SPI header and the man pages.  Its dependencies: what
# dpkg-shlibdeps finds (libc6: nothing else is linked), libfabric1 only
# recommended — the fabric provider opens it at its first use, and without it
# fabric routes fall back to kernel TCP; gnuplot suggested (bench --plot).
# scripts/build.sh configures the release build for /usr, where the package
# installs: the library then goes to Debian's multiarch directory
# (/usr/lib/x86_64-linux-gnu), where `sockswitch run` looks (cli/libpath.c).
include(GNUInstallDirs)
# `cpack` and `make install` package what is built and build nothing: the
# build comes first (scripts/build.sh package), and t_package packages the
# tree that tests running beside it use
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

install(TARGETS sockswitch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/sockswitch/provider.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sockswitch)
# man pages compressed, as Debian keeps them (man reads both)
set(SSW_MAN_PAGES)
foreach(page sockswitch.1 sockswitch.conf.5)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" sect ${page})
  set(gz ${CMAKE_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${gz} DEPENDS ${CMAKE_SOURCE_DIR}/man/${page}
    COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/man/${page} ${CMAKE_BINARY_DIR}/man/${page}
    COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/man/${page} VERBATIM)
  list(APPEND SSW_MAN_PAGES ${gz})
  install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sect})
endforeach()
add_custom_target(man-pages ALL DEPENDS ${SSW_MAN_PAGES})

# the version `sockswitch --version` prints (cli/cli.h) is the package's
file(STRINGS ${CMAKE_SOURCE_DIR}/cli/cli.h SSW_VERSION_LINE REGEX "#define SSW_VERSION \"")
string(REGEX REPLACE ".*\"(.*)\".*" "\\1" SSW_PACKAGE_VERSION "${SSW_VERSION_LINE}")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sockswitch)
set(CPACK_PACKAGE_VERSION ${SSW_PACKAGE_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "socket switch: TCP connections of unmodified programs over shared memory")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "libsockswitch.so, preloaded into unmodified programs (sockswitch run), carries
their TCP connections over shared memory on the same host, or over libfabric
between hosts, and falls back to kernel TCP whenever the fast path cannot
serve. The sockswitch command runs programs under the switch and lists, checks
and measures what it does (stat, routes, doctor, bench).")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "sockswitch developers <sockswitch@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # sockswitch_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)    # Depends: what the binaries link (libc6)
if(SSW_WITH_FABRIC)
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS libfabric1)
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "gnuplot-nox | gnuplot")
set(CPACK_STRIP_FILES ON)                 # the release build keeps its debug information; the package does not
include(CPack)
