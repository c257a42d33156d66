/* nabla — the version of the public headers and of the library.
 * The CMake project version (CMakeLists.txt) is the same string; tests/test_layers.py checks it. */
#ifndef NABLA_VERSION_H
#define NABLA_VERSION_H

#define NABLA_VERSION_MAJOR 0
#define NABLA_VERSION_MINOR 1
#define NABLA_VERSION_PATCH 0
#define NABLA_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string (may differ from NABLA_VERSION_STRING if headers and library
 * come from different builds). */
const char *nb_version(void);

#ifdef __cplusplus
}
#endif
#endif
