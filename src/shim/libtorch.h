// The libtorch headers the shims share, parsed once per build: build.rs precompiles this header
// and every shim starts with it (`-include`), so that each of them does not parse libtorch's
// headers again (about 20 s a file on the 2-core machine).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
