# fabric.cmake — whether this build has the fabric provider (src/providers/fabric).
#
# The provider needs libfabric's headers (libfabric-dev) to build and loads
# libfabric.so.1 at its first use (fab_dl.c); the core, shm and their tests
# need neither.  SSW_FABRIC chooses:
#   AUTO  built when rdma/fabric.h is found (plain cmake)
#   ON    required: configure fails without the headers (scripts/build.sh,
#         so that CI never skips the fabric tests unnoticed)
#   OFF   left out even where the headers are: they are then shadowed by
#         headers that stop the compile, so that the build proves nothing
#         outside the provider includes them
# Included by the top CMakeLists.txt after SSW_CORE_SRC is globbed: drops the
# provider's sources from it when left out.  Sets SSW_WITH_FABRIC (ON/OFF)
# and SSW_FABRIC_LEFT_OUT (why, empty when built); the C code sees
# SSW_WITH_FABRIC or SSW_FABRIC_LEFT_OUT="why" (src/switch/route/providers.c).
set(SSW_FABRIC AUTO CACHE STRING "build the fabric provider: AUTO (when libfabric's headers are found), ON, OFF")
set_property(CACHE SSW_FABRIC PROPERTY STRINGS AUTO ON OFF)

set(SSW_WITH_FABRIC OFF)
set(SSW_FABRIC_LEFT_OUT "")
if(SSW_FABRIC STREQUAL "OFF")
  set(SSW_FABRIC_LEFT_OUT "configured with -DSSW_FABRIC=OFF")
elseif(SSW_FABRIC STREQUAL "ON" OR SSW_FABRIC STREQUAL "AUTO")
  find_path(FABRIC_INCLUDE rdma/fabric.h)
  if(FABRIC_INCLUDE)
    set(SSW_WITH_FABRIC ON)
  elseif(SSW_FABRIC STREQUAL "ON")
    message(FATAL_ERROR "SSW_FABRIC=ON, but libfabric's headers (rdma/fabric.h) are not found: install "
      "libfabric-dev (scripts/setup.sh), or configure with -DSSW_FABRIC=OFF for a build without the fabric provider")
  else()
    set(SSW_FABRIC_LEFT_OUT "built where libfabric's headers were not found")
  endif()
else()
  message(FATAL_ERROR "SSW_FABRIC=${SSW_FABRIC}: expected AUTO, ON or OFF")
endif()
# for tests/integration/lib.sh (ssw_need_fabric), which reads the cache
set(SSW_FABRIC_LEFT_OUT "${SSW_FABRIC_LEFT_OUT}" CACHE INTERNAL "why this build has no fabric provider")

if(SSW_WITH_FABRIC)
  message(STATUS "fabric provider: built (libfabric's headers in ${FABRIC_INCLUDE})")
  include_directories(SYSTEM ${FABRIC_INCLUDE})
  add_compile_definitions(SSW_WITH_FABRIC=1)
else()
  message(STATUS "fabric provider: left out (${SSW_FABRIC_LEFT_OUT})")
  list(FILTER SSW_CORE_SRC EXCLUDE REGEX "/src/providers/fabric/")
  add_compile_definitions("SSW_FABRIC_LEFT_OUT=\"${SSW_FABRIC_LEFT_OUT}\"")
  # every libfabric header stops the compile: what builds here needs none
  set(poison ${CMAKE_BINARY_DIR}/no-libfabric)
  foreach(h fabric fi_atomic fi_cm fi_collective fi_domain fi_endpoint fi_eq fi_errno fi_ext fi_rma fi_tagged
            fi_trigger providers/fi_log providers/fi_prov)
    file(CONFIGURE OUTPUT ${poison}/rdma/${h}.h CONTENT
      "#error \"rdma/${h}.h: this build has no fabric provider (${SSW_FABRIC_LEFT_OUT}): nothing may include libfabric's headers\"\n")
  endforeach()
  include_directories(BEFORE ${poison})
endif()
