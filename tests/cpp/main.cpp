// The runner of the C++ binding's tests: every tests/cpp/test_*.cpp file is its own translation
// unit including tensorref.hpp, and all of them are linked into one program with this file (which
// includes the header too). That the program links at all shows the header is ODR-safe: an
// out-of-line definition in it would be defined once per translation unit.
#include "tensorref.hpp"

#include "harness.hpp"

int main() { return harness::run_all(); }
