/* nb_version: the library's version. NB_VERSION_STRING comes from the CMake project version
 * (CMakeLists.txt); a build without it reports the headers' version. */
#include "nabla/version.h"

#ifndef NB_VERSION_STRING
#define NB_VERSION_STRING NABLA_VERSION_STRING
#endif

const char *nb_version(void) { return NB_VERSION_STRING; }
