/* The C side of the .NET benchmark: the same 4-element add, called from C directly. Built into a
 * small shared library that AddBench.cs calls once per measurement, so both sides run in one
 * process against the one loaded libtensorref. Each iteration is tr_tensor_add then
 * tr_tensor_release of the result, as `using (var c = a + b) {}` does from C#. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stdint.h>
#include <time.h>

#include "tensorref.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Nanoseconds per add + release over `iters` iterations, or a negative status on failure. */
double trbench_c_add_ns(uint64_t iters) {
  const float data[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  tr_tensor a = {0}, b = {0}, c = {0};
  tr_status st = tr_tensor_from_data((const uint8_t *)data, sizeof data, shape, 1, TR_DTYPE_F32, &a);
  if (st == TR_OK) st = tr_tensor_from_data((const uint8_t *)data, sizeof data, shape, 1, TR_DTYPE_F32, &b);
  double t0 = now_ns();
  for (uint64_t i = 0; st == TR_OK && i < iters; i++) {
    st = tr_tensor_add(a, b, &c);
    if (st == TR_OK) st = tr_tensor_release(c);
  }
  double t1 = now_ns();
  tr_tensor_release(a);
  tr_tensor_release(b);
  return st == TR_OK ? (t1 - t0) / (double)iters : -(double)st;
}
