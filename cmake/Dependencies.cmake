# Every third-party dependency comes from Debian bookworm packages, installed by
# scripts/install_deps.sh.
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
# libonnx-dev: the ONNX protobuf (onnx_proto target) for reading model files.
find_package(ONNX CONFIG REQUIRED)
# prometheus-cpp-dev: metrics registry (core) and the /metrics HTTP exposer (pull).
find_package(prometheus-cpp CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_program(GRPC_PYTHON_PLUGIN grpc_python_plugin REQUIRED)
find_program(PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED)

# BLIS ships no CMake package: libblis-dev puts blis.h under the multiarch
# include directory (an alternatives link to the OpenMP build by default).
find_path(BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE} REQUIRED)
find_library(BLIS_LIBRARY NAMES blis REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS C CXX)
add_library(blis::blis UNKNOWN IMPORTED)
set_target_properties(blis::blis PROPERTIES
  IMPORTED_LOCATION ${BLIS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${BLIS_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES OpenMP::OpenMP_C)
message(STATUS "BLIS: ${BLIS_LIBRARY} (headers in ${BLIS_INCLUDE_DIR})")

# The HTTP front end: libboost-dev (Beast and Asio, header-only), rapidjson-dev
# (header-only), zlib1g-dev and libssl-dev.
find_package(Boost 1.74 REQUIRED)
find_path(RAPIDJSON_INCLUDE_DIR rapidjson/reader.h REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED)
