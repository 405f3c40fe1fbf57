// Included before every C++ file of a TSan tree built with gcc (CMakeLists.txt;
// clang, which tests/tsan.sh uses, does not define __SANITIZE_THREAD__).
//
// protobuf 3.21's MapFieldBase has two more fields when __SANITIZE_THREAD__ is
// defined (map_field.h, its const/mutable access counters). Debian's
// libprotobuf is not built with TSan, so a TSan-built caller and the library
// would disagree on the layout of every map field, and the library's
// text-format parser wrote past one (a SEGV in repository_test). Its headers
// are read here first, without the macro, as the library was built.
#pragma once
#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")
