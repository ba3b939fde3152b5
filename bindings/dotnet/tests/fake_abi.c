/* A stand-in libtensorref.so that reports another ABI version, for AbiTests: the .NET binding must
 * refuse it with a clear message before calling anything else. Built by mk/dotnet.mk into
 * build/dotnet/fake-abi/. */
#include <stdint.h>

uint32_t tr_abi_version(void) { return 999; }

const char *tr_version(void) { return "libtensorref 9.9.9 (ABI 999; a test stand-in)"; }
